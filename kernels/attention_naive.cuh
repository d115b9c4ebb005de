// Row kernels of naive (materialised) attention: masked softmax with logsumexp, recomputation of the probabilities
// from the logsumexp, and the softmax backward. The batched GEMMs around them run through cuBLASLt
// (src/backend/cuda/attention.cpp).
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// For each of `rows` rows of S [rows, T] f32 (row r is query i = r % T): P[r, j] = exp(S[r, j] - lse[r]) for the
/// visible keys (j <= i when causal, all j otherwise) and 0 for the others; lse[r] = logsumexp of the visible S.
/// P is f32 or bf16 and may be the same memory as S when f32.
void attn_softmax_fwd(void* P, DType tp, float* lse, const float* S, int64_t rows, int T, bool causal, cudaStream_t s);

/// P[r, j] = exp(S[r, j] - lse[r]) on the visible keys, 0 elsewhere (the forward's P, recomputed from its lse).
/// P may be the same memory as S when f32.
void attn_probs(void* P, DType tp, const float* S, const float* lse, int64_t rows, int T, bool causal, cudaStream_t s);

/// dS[r, j] = P[r, j] (dP[r, j] - sum_k P[r, k] dP[r, k]) (the softmax backward; 0 on masked keys). dP f32; P and
/// dS f32 or bf16; dS may be the same memory as dP when f32.
void attn_softmax_bwd(void* dS, DType tds, const void* P, DType tp, const float* dP, int64_t rows, int T, bool causal,
                      cudaStream_t s);

}  // namespace trainer::kernels
