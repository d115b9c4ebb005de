// SwiGLU feed-forward gate (Shazeer 2020, "GLU Variants Improve Transformer", arXiv:2002.05202, eq. 6;
// DESIGN.md: FFN = w2(silu(w1 x) * w3 x)):
//   forward:  g[n,f] = silu(a[n,f]) * b[n,f],  a = ab[n, f], b = ab[n, F + f],  silu(a) = a / (1 + exp(-a))
//   backward: da = dg * b * s (1 + a (1 - s)),  db = dg * silu(a),  s = sigmoid(a)   (dab overwritten)
// ab, dab [N, 2F]; g, dg [N, F]; each f32 or bf16; arithmetic in fp32. Vectorised (8 elements per thread) when the
// dtypes agree, F % 8 == 0 and the pointers are 16-byte aligned; otherwise one thread per (n, f).
#include "common.cuh"
#include "align.h"
#include "swiglu.cuh"

#include <type_traits>

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

// Scalar kernels (any F, any alignment): one thread per (n, f), grid-stride.
template <class TG, class TAB>
__global__ __launch_bounds__(kThreads) void swiglu_fwd_kernel(TG* __restrict__ g, const TAB* __restrict__ ab,
                                                              int64_t N, int64_t F) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float a = to_f32(ab[n * 2 * F + f]), b = to_f32(ab[n * 2 * F + F + f]);
    g[i] = from_f32<TG>(a / (1.f + expf(-a)) * b);
  }
}

// g (optional, may alias dg: no __restrict__ on either) receives the forward's silu(a) * b, same expression.
template <class TDAB, class TDG, class TAB, class TG>
__global__ __launch_bounds__(kThreads) void swiglu_bwd_kernel(TDAB* __restrict__ dab, const TDG* dg,
                                                              const TAB* __restrict__ ab, TG* g, int64_t N,
                                                              int64_t F) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * F; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / F, f = i % F;
    const float a = to_f32(ab[n * 2 * F + f]), b = to_f32(ab[n * 2 * F + F + f]), d = to_f32(dg[i]);
    const float sg = 1.f / (1.f + expf(-a));
    dab[n * 2 * F + f] = from_f32<TDAB>(d * b * sg * (1.f + a * (1.f - sg)));
    dab[n * 2 * F + F + f] = from_f32<TDAB>(d * a * sg);
    if (g) g[i] = from_f32<TG>(a / (1.f + expf(-a)) * b);
  }
}

// Vector kernels: 8 consecutive elements per thread through 16-byte (bf16) or 2 x 16-byte (f32) accesses, rows on
// blockIdx.y (no 64-bit division per element). Used when all tensors share one dtype, F % 8 == 0 and every pointer
// is 16-byte aligned (the model's case); the arithmetic is the scalar kernels' exactly.
constexpr int kVec = 8;
template <class T>
struct alignas(16) Pack {
  T v[kVec];
};

template <class T>
__global__ __launch_bounds__(kThreads) void swiglu_fwd_vec_kernel(T* __restrict__ g, const T* __restrict__ ab,
                                                                  int64_t N, int64_t F) {
  const int64_t f = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (f >= F) return;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const Pack<T> a = *reinterpret_cast<const Pack<T>*>(ab + n * 2 * F + f);
    const Pack<T> b = *reinterpret_cast<const Pack<T>*>(ab + n * 2 * F + F + f);
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float av = to_f32(a.v[k]);
      out.v[k] = from_f32<T>(av / (1.f + expf(-av)) * to_f32(b.v[k]));
    }
    *reinterpret_cast<Pack<T>*>(g + n * F + f) = out;
  }
}

template <class T>
__global__ __launch_bounds__(kThreads) void swiglu_bwd_vec_kernel(T* __restrict__ dab, const T* dg,
                                                                  const T* __restrict__ ab, T* g, int64_t N,
                                                                  int64_t F) {
  const int64_t f = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (f >= F) return;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const Pack<T> a = *reinterpret_cast<const Pack<T>*>(ab + n * 2 * F + f);
    const Pack<T> b = *reinterpret_cast<const Pack<T>*>(ab + n * 2 * F + F + f);
    const Pack<T> d = *reinterpret_cast<const Pack<T>*>(dg + n * F + f);
    Pack<T> da, db, gv;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float av = to_f32(a.v[k]), bv = to_f32(b.v[k]), dv = to_f32(d.v[k]);
      const float sg = 1.f / (1.f + expf(-av));
      da.v[k] = from_f32<T>(dv * bv * sg * (1.f + av * (1.f - sg)));
      db.v[k] = from_f32<T>(dv * av * sg);
      gv.v[k] = from_f32<T>(av / (1.f + expf(-av)) * bv);
    }
    *reinterpret_cast<Pack<T>*>(dab + n * 2 * F + f) = da;
    *reinterpret_cast<Pack<T>*>(dab + n * 2 * F + F + f) = db;
    if (g) *reinterpret_cast<Pack<T>*>(g + n * F + f) = gv;  // after d was read: g may be dg
  }
}

dim3 vec_grid(int64_t N, int64_t F) {
  const int64_t x = ceil_div<int64_t>(F / kVec, kThreads);
  return dim3(unsigned(x), unsigned(N < 65535 ? N : 65535));
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void swiglu_fwd(void* g, DType tg, const void* ab, DType tab, int64_t N, int64_t F, cudaStream_t s) {
  if (N * F <= 0) return;
  dispatch_float(tg, "swiglu_fwd g", [&](auto ag) {
    dispatch_float(tab, "swiglu_fwd ab", [&](auto aab) {
      using TG = typename decltype(ag)::type;
      using TAB = typename decltype(aab)::type;
      if constexpr (std::is_same_v<TG, TAB>) {
        if (F % kVec == 0 && aligned16(g) && aligned16(ab)) {
          swiglu_fwd_vec_kernel<TG><<<vec_grid(N, F), kThreads, 0, s>>>(static_cast<TG*>(g),
                                                                        static_cast<const TAB*>(ab), N, F);
          return;
        }
      }
      swiglu_fwd_kernel<TG, TAB><<<elementwise_grid(N * F, kThreads), kThreads, 0, s>>>(
          static_cast<TG*>(g), static_cast<const TAB*>(ab), N, F);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void swiglu_bwd(void* dab, DType tdab, const void* dg, DType tdg, const void* ab, DType tab, void* g, DType tg,
                int64_t N, int64_t F, cudaStream_t s) {
  if (N * F <= 0) return;
  if (!g) tg = tab;  // any dtype: the pointer is null
  dispatch_float(tdab, "swiglu_bwd dab", [&](auto adab) {
    dispatch_float(tdg, "swiglu_bwd dg", [&](auto adg) {
      dispatch_float(tab, "swiglu_bwd ab", [&](auto aab) {
        dispatch_float(tg, "swiglu_bwd g", [&](auto ag) {
          using TDAB = typename decltype(adab)::type;
          using TDG = typename decltype(adg)::type;
          using TAB = typename decltype(aab)::type;
          using TG = typename decltype(ag)::type;
          if constexpr (std::is_same_v<TDAB, TDG> && std::is_same_v<TDG, TAB> && std::is_same_v<TAB, TG>) {
            if (F % kVec == 0 && aligned16(dab) && aligned16(dg) && aligned16(ab) && (!g || aligned16(g))) {
              swiglu_bwd_vec_kernel<TAB><<<vec_grid(N, F), kThreads, 0, s>>>(
                  static_cast<TDAB*>(dab), static_cast<const TDG*>(dg), static_cast<const TAB*>(ab),
                  static_cast<TG*>(g), N, F);
              return;
            }
          }
          swiglu_bwd_kernel<TDAB, TDG, TAB, TG><<<elementwise_grid(N * F, kThreads), kThreads, 0, s>>>(
              static_cast<TDAB*>(dab), static_cast<const TDG*>(dg), static_cast<const TAB*>(ab), static_cast<TG*>(g),
              N, F);
        });
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
