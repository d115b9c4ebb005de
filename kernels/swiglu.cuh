// SwiGLU launchers. ab [N, 2F] = [a | b] (a = w1 x, b = w3 x), g and dg [N, F], dab [N, 2F]; f32 or bf16 each.
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// g = silu(a) * b, silu(a) = a * sigmoid(a), in fp32.
void swiglu_fwd(void* g, DType tg, const void* ab, DType tab, int64_t N, int64_t F, cudaStream_t s);
/// dab = [dg * b * silu'(a) | dg * silu(a)] (overwritten), silu'(a) = sigmoid(a) (1 + a (1 - sigmoid(a))).
/// g (may be null, may alias dg; dtype tg) also receives silu(a) * b, each element written after dg's is read.
void swiglu_bwd(void* dab, DType tdab, const void* dg, DType tdg, const void* ab, DType tab, void* g, DType tg,
                int64_t N, int64_t F, cudaStream_t s);

}  // namespace trainer::kernels
