// Elementwise kernels over flat arrays of n elements (grid-stride loops, fp32 arithmetic):
//   fill:        x[i] = value                       x: f32 | bf16 | i32
//   cast:        dst[i] = T_dst(src[i])             f32 <-> bf16 (round to nearest even), or a copy
//   add_inplace: x[i] = TX(f32(x[i]) + f32(y[i]))   x, y: f32 | bf16 (each its own)
//   scale:       x[i] = T(f32(x[i]) * alpha)        f32 | bf16
// Pattern: llm.c `llmc/cuda_utils.cuh` and ggml `src/ggml-cuda/scale.cu` (one thread per element, grid-stride).
#include "common.cuh"
#include "elementwise.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

template <class T>
__global__ __launch_bounds__(kThreads) void fill_kernel(T* __restrict__ x, int64_t n, T value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = value;
}

template <class TD, class TS>
__global__ __launch_bounds__(kThreads) void cast_kernel(TD* __restrict__ dst, const TS* __restrict__ src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<TD>(to_f32(src[i]));
}

template <class TX, class TY>
__global__ __launch_bounds__(kThreads) void add_inplace_kernel(TX* __restrict__ x, const TY* __restrict__ y,
                                                               int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_f32<TX>(to_f32(x[i]) + to_f32(y[i]));
}

template <class T>
__global__ __launch_bounds__(kThreads) void scale_kernel(T* __restrict__ x, int64_t n, float alpha) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = from_f32<T>(to_f32(x[i]) * alpha);
}

// hi = x rounded to TF32 (10 mantissa bits, nearest, ties away: cvt.rna.tf32.f32) as an fp32 value, lo = x - hi
// (exact in fp32); where the rounding overflows (|x| near FLT_MAX, or x = +-inf) hi = x, lo = 0. Grid-stride over n.
__global__ __launch_bounds__(kThreads) void split_tf32_kernel(float* __restrict__ hi, float* __restrict__ lo,
                                                               const float* __restrict__ x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    uint32_t h;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(v));
    float hv = __uint_as_float(h & 0xffffe000u);  // PTX leaves the 13 low bits of the tf32 result unspecified
    if (isinf(hv)) hv = v;  // +-inf (and finite values rounding past the largest float) stay whole: lo 0, not NaN
    hi[i] = hv;
    lo[i] = v - hv;
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void fill(void* x, DType t, int64_t n, float value, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned grid = elementwise_grid(n, kThreads);
  switch (t) {
    case DType::f32: fill_kernel<float><<<grid, kThreads, 0, s>>>(static_cast<float*>(x), n, value); break;
    case DType::bf16:
      fill_kernel<bf16><<<grid, kThreads, 0, s>>>(static_cast<bf16*>(x), n, __float2bfloat16(value));
      break;
    case DType::i32: fill_kernel<int32_t><<<grid, kThreads, 0, s>>>(static_cast<int32_t*>(x), n, int32_t(value)); break;
    default: TRAINER_CHECK(false, "fill: dtype {} is not supported", dtype_name(t));
  }
  CUDA_CHECK(cudaGetLastError());
}

void cast(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (dst_t == src_t) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(dst_t), cudaMemcpyDeviceToDevice, s));
    return;
  }
  dispatch_float(dst_t, "cast", [&](auto td) {
    dispatch_float(src_t, "cast", [&](auto ts) {
      using TD = typename decltype(td)::type;
      using TS = typename decltype(ts)::type;
      cast_kernel<TD, TS><<<elementwise_grid(n, kThreads), kThreads, 0, s>>>(static_cast<TD*>(dst),
                                                                            static_cast<const TS*>(src), n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void add_inplace(void* x, DType tx, const void* y, DType ty, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_float(tx, "add_inplace x", [&](auto ax) {
    dispatch_float(ty, "add_inplace y", [&](auto ay) {
      using TX = typename decltype(ax)::type;
      using TY = typename decltype(ay)::type;
      add_inplace_kernel<TX, TY><<<elementwise_grid(n, kThreads), kThreads, 0, s>>>(static_cast<TX*>(x),
                                                                                   static_cast<const TY*>(y), n);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

void scale(void* x, DType t, int64_t n, float alpha, cudaStream_t s) {
  if (n <= 0) return;
  dispatch_float(t, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<elementwise_grid(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(x), n, alpha);
  });
  CUDA_CHECK(cudaGetLastError());
}

void split_tf32(float* hi, float* lo, const float* x, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  split_tf32_kernel<<<elementwise_grid(n, kThreads), kThreads, 0, s>>>(hi, lo, x, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
