// SwiGLU feed-forward gate (Shazeer 2020, "GLU Variants Improve Transformer", arXiv:2002.05202, eq. 6;
// DESIGN.md: FFN = w2(silu(w1 x) * w3 x)):
//   forward:  g[n,f] = silu(a[n,f]) * b[n,f],  a = ab[n, f], b = ab[n, F + f],  silu(a) = a / (1 + exp(-a))
//   backward: da = dg * b * s (1 + a (1 - s)),  db = dg * silu(a),  s = sigmoid(a)   (dab overwritten)
// ab, dab [N, 2F]; g, dg [N, F]; each f32 or bf16; arithmetic in fp32. One thread per (n, f), grid-stride.
#include "common.cuh"
#include "swiglu.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

template <class TG, class TAB>
__global__ __launch_bounds__(kThreads) void swiglu_fwd_kernel(TG* __restrict__ g, const TAB* __restrict__ ab,
                                                              int64_t N, int64_t F) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float a = to_f32(ab[n * 2 * F + f]), b = to_f32(ab[n * 2 * F + F + f]);
    g[i] = from_f32<TG>(a / (1.f + expf(-a)) * b);
  }
}

template <class TDAB, class TDG, class TAB>
__global__ __launch_bounds__(kThreads) void swiglu_bwd_kernel(TDAB* __restrict__ dab, const TDG* __restrict__ dg,
                                                              const TAB* __restrict__ ab, int64_t N, int64_t F) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float a = to_f32(ab[n * 2 * F + f]), b = to_f32(ab[n * 2 * F + F + f]), d = to_f32(dg[i]);
    const float sg = 1.f / (1.f + expf(-a));
    dab[n * 2 * F + f] = from_f32<TDAB>(d * b * sg * (1.f + a * (1.f - sg)));
    dab[n * 2 * F + F + f] = from_f32<TDAB>(d * a * sg);
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void swiglu_fwd(void* g, DType tg, const void* ab, DType tab, int64_t N, int64_t F, cudaStream_t s) {
  if (N * F <= 0) return;
  dispatch_float(tg, "swiglu_fwd g", [&](auto ag) {
    dispatch_float(tab, "swiglu_fwd ab", [&](auto aab) {
      using TG = typename decltype(ag)::type;
      using TAB = typename decltype(aab)::type;
      swiglu_fwd_kernel<TG, TAB><<<elementwise_grid(N * F, kThreads), kThreads, 0, s>>>(
          static_cast<TG*>(g), static_cast<const TAB*>(ab), N, F);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_bwd(void* dab, DType tdab, const void* dg, DType tdg, const void* ab, DType tab, int64_t N, int64_t F,
                cudaStream_t s) {
  if (N * F <= 0) return;
  dispatch_float(tdab, "swiglu_bwd dab", [&](auto adab) {
    dispatch_float(tdg, "swiglu_bwd dg", [&](auto adg) {
      dispatch_float(tab, "swiglu_bwd ab", [&](auto aab) {
        using TDAB = typename decltype(adab)::type;
        using TDG = typename decltype(adg)::type;
        using TAB = typename decltype(aab)::type;
        swiglu_bwd_kernel<TDAB, TDG, TAB><<<elementwise_grid(N * F, kThreads), kThreads, 0, s>>>(
            static_cast<TDAB*>(dab), static_cast<const TDG*>(dg), static_cast<const TAB*>(ab), N, F);
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
