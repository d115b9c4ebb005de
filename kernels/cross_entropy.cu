// Fused softmax cross-entropy over a row of logits, with its gradient (llm.c `llmc/fused_classifier.cuh`,
// fused_classifier_kernel5: one block per row, loss and dlogits written in place of the logits).
//   lse[n]     = m + log(sum_v exp(x[n,v] - m)),  m = max_v x[n,v]       (online max/sum: Milakov & Gimelshein 2018)
//   losses[n]  = lse[n] - x[n, t_n]
//   dlogits[n,v] = dscale * (exp(x[n,v] - lse[n]) - [v == t_n])          (optional; may alias the logits)
// logits and dlogits [N, V] row-major, f32 or bf16; targets i32 [N]; losses f32 [N]; arithmetic in fp32.
// One block per row: one read of the row for (max, sum), then a second read (mostly from L2) to write dlogits.
#include "common.cuh"
#include "cross_entropy.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 512;

// No __restrict__ on logits/dlogits: they may be the same buffer (each element is read, then written, by one thread).
template <class TL, class TD>
__global__ __launch_bounds__(kThreads) void cross_entropy_kernel(float* __restrict__ losses, TD* dlogits,
                                                                 const TL* logits, const int32_t* __restrict__ targets,
                                                                 int64_t V, float dscale) {
  __shared__ MaxSum shared[32];
  const int64_t n = blockIdx.x;
  const TL* xr = logits + n * V;
  MaxSum acc{-INFINITY, 0.f};
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {  // one exp per element
    const float x = to_f32(xr[v]);
    if (x > acc.m) {
      acc.s = acc.s * expf(acc.m - x) + 1.f;  // exp(-inf) = 0 on the first element
      acc.m = x;
    } else {
      acc.s += expf(x - acc.m);
    }
  }
  acc = block_maxsum(acc, shared);
  const float lse = acc.m + logf(acc.s);
  const int32_t t = targets[n];
  const bool valid = t >= 0 && t < V;
  const float x_t = valid ? to_f32(xr[t]) : NAN;  // read before any thread overwrites the row (dlogits may alias)
  __syncthreads();
  if (threadIdx.x == 0) losses[n] = lse - x_t;
  if (dlogits == nullptr) return;
  TD* dr = dlogits + n * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = valid ? expf(to_f32(xr[v]) - lse) : NAN;
    dr[v] = from_f32<TD>(dscale * (p - (v == t ? 1.f : 0.f)));
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void cross_entropy(float* losses, void* dlogits, DType tdl, const void* logits, DType tl, const int32_t* targets,
                   int64_t N, int64_t V, float dscale, cudaStream_t s) {
  if (N <= 0) return;
  dispatch_float(tl, "cross_entropy logits", [&](auto al) {
    dispatch_float(dlogits ? tdl : tl, "cross_entropy dlogits", [&](auto ad) {
      using TL = typename decltype(al)::type;
      using TD = typename decltype(ad)::type;
      cross_entropy_kernel<TL, TD><<<unsigned(N), kThreads, 0, s>>>(losses, static_cast<TD*>(dlogits),
                                                                    static_cast<const TL*>(logits), targets, V, dscale);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
