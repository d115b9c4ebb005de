// Naive (materialised) causal attention, the row-wise parts (Vaswani et al. 2017, eq. 1; FlashAttention-2,
// Dao 2023, arXiv:2307.08691, section 2.2 for the backward in this notation). Per (batch, head), with
// S = scale Q K^T [T, T] already computed by a GEMM (in fp32):
//   forward:   lse_i = log sum_{j visible} exp(S_ij),   P_ij = exp(S_ij - lse_i) (0 when j is masked)
//   recompute: P_ij = exp(S_ij - lse_i)   (flash2 fallback: P is rebuilt from the saved lse, not stored)
//   backward:  dS_ij = P_ij (dP_ij - D_i),  D_i = sum_j P_ij dP_ij  (= rowsum(dO o O)),  dP = dO V^T
// "visible": j <= i when causal, every j otherwise. S, dP f32 [rows, T]; P, dS f32 or bf16 [rows, T]; lse f32 [rows].
// One block per row; fp32 arithmetic. The softmax reads its row once for (max, sum) (online softmax, Milakov &
// Gimelshein 2018) and once more to write P.
#include "attention_naive.cuh"
#include "common.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kMaxThreads = 256;

int threads_for(int T) {
  const int t = ceil_div(ceil_div(T, 4), 32) * 32;  // about 4 elements per thread, whole warps, 32..256
  return t < 32 ? 32 : (t > kMaxThreads ? kMaxThreads : t);
}

// S and P may alias (f32): each element is read, then written, by the same thread.
template <class TP>
__global__ __launch_bounds__(kMaxThreads) void attn_softmax_fwd_kernel(TP* P, float* __restrict__ lse, const float* S,
                                                                       int T, bool causal) {
  __shared__ MaxSum shared[32];
  const int64_t r = blockIdx.x;
  const int i = int(r % T);
  const int L = causal ? i + 1 : T;
  const float* sr = S + r * T;
  MaxSum acc{-INFINITY, 0.f};
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    const float x = sr[j];
    if (x > acc.m) {
      acc.s = acc.s * expf(acc.m - x) + 1.f;
      acc.m = x;
    } else {
      acc.s += expf(x - acc.m);
    }
  }
  acc = block_maxsum(acc, shared);
  const float l = acc.m + logf(acc.s);
  TP* pr = P + r * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x) pr[j] = from_f32<TP>(j < L ? expf(sr[j] - l) : 0.f);
  if (threadIdx.x == 0) lse[r] = l;
}

template <class TP>
__global__ __launch_bounds__(kMaxThreads) void attn_probs_kernel(TP* P, const float* S, const float* __restrict__ lse,
                                                                 int T, bool causal) {
  const int64_t r = blockIdx.x;
  const int i = int(r % T);
  const int L = causal ? i + 1 : T;
  const float l = lse[r];
  const float* sr = S + r * T;
  TP* pr = P + r * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x) pr[j] = from_f32<TP>(j < L ? expf(sr[j] - l) : 0.f);
}

// dS and dP may alias (f32): each element is read, then written, by the same thread.
template <class TS, class TP>
__global__ __launch_bounds__(kMaxThreads) void attn_softmax_bwd_kernel(TS* dS, const TP* __restrict__ P,
                                                                       const float* dP, int T, bool causal) {
  __shared__ float shared[32];
  const int64_t r = blockIdx.x;
  const int i = int(r % T);
  const int L = causal ? i + 1 : T;
  const TP* pr = P + r * T;
  const float* dpr = dP + r * T;
  float d = 0.f;
  for (int j = threadIdx.x; j < L; j += blockDim.x) d += to_f32(pr[j]) * dpr[j];
  d = block_sum(d, shared);
  TS* dsr = dS + r * T;
  for (int j = threadIdx.x; j < T; j += blockDim.x)
    dsr[j] = from_f32<TS>(j < L ? to_f32(pr[j]) * (dpr[j] - d) : 0.f);
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void attn_softmax_fwd(void* P, DType tp, float* lse, const float* S, int64_t rows, int T, bool causal, cudaStream_t s) {
  if (rows <= 0) return;
  dispatch_float(tp, "attn_softmax_fwd P", [&](auto ap) {
    using TP = typename decltype(ap)::type;
    attn_softmax_fwd_kernel<TP><<<unsigned(rows), threads_for(T), 0, s>>>(static_cast<TP*>(P), lse, S, T, causal);
  });
  CUDA_CHECK(cudaGetLastError());
}

void attn_probs(void* P, DType tp, const float* S, const float* lse, int64_t rows, int T, bool causal, cudaStream_t s) {
  if (rows <= 0) return;
  dispatch_float(tp, "attn_probs P", [&](auto ap) {
    using TP = typename decltype(ap)::type;
    attn_probs_kernel<TP><<<unsigned(rows), threads_for(T), 0, s>>>(static_cast<TP*>(P), S, lse, T, causal);
  });
  CUDA_CHECK(cudaGetLastError());
}

void attn_softmax_bwd(void* dS, DType tds, const void* P, DType tp, const float* dP, int64_t rows, int T, bool causal,
                      cudaStream_t s) {
  if (rows <= 0) return;
  dispatch_float(tds, "attn_softmax_bwd dS", [&](auto as) {
    dispatch_float(tp, "attn_softmax_bwd P", [&](auto ap) {
      using TS = typename decltype(as)::type;
      using TP = typename decltype(ap)::type;
      attn_softmax_bwd_kernel<TS, TP><<<unsigned(rows), threads_for(T), 0, s>>>(
          static_cast<TS*>(dS), static_cast<const TP*>(P), dP, T, causal);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
