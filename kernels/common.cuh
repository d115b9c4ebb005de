// Shared helpers for the CUDA kernels: the CUDA_CHECK macro, ceil_div, dtype dispatch, bf16 <-> f32 conversions,
// warp and block reductions.
//
// Host-only parts (CUDA_CHECK, ceil_div, dispatch_float) compile with g++ too, so src/backend/cuda/*.cpp can include
// the kernels' headers; device helpers are under __CUDACC__.
// Sources: llm.c `llmc/cuda_common.h` (cudaCheck, CEIL_DIV) and `llmc/cuda_utils.cuh` (warpReduceSum,
// blockReduce), ggml `src/ggml-cuda/common.cuh` (warp_reduce_sum).
#pragma once
// fmt 9 (pulled in by core/errors.h) turns its constexpr off when it sees __NVCC__ but keeps C++20 constexpr and
// consteval paths that call those functions, which nvcc 13.0 rejects ("call to non-constexpr function",
// "did not produce a valid constant expression"). nvcc 13 handles fmt's constexpr code, so turn it back on. This
// header must be the first include of every .cu file so that the macro is set before fmt is read.
// fmt's long double overloads also make nvcc warn (#20208) in every file; they never run on the device.
#if defined(__CUDACC__)
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif
#pragma nv_diag_suppress 20208
#endif
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/errors.h"
#include "core/tensor.h"

/// Aborts the job (trainer::fatal) with the CUDA error text when a runtime call fails.
#define CUDA_CHECK(expr) TRAINER_CHECK_LIB(expr, cudaSuccess, cudaGetErrorString, "CUDA")

namespace trainer {

using bf16 = __nv_bfloat16;

#ifdef __CUDACC__
/// The shared-state-space address of a shared-memory pointer (the 32-bit operand of PTX's shared-memory instructions).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#endif

template <class A, class B>
__host__ __device__ constexpr A ceil_div(A a, B b) {
  return (a + A(b) - 1) / A(b);
}

/// Opts `kernel` in to `bytes` of dynamic shared memory when that is above the 48 KiB default (the attribute belongs
/// to the function; about a microsecond of host time per call). CUDA errors abort through CUDA_CHECK.
template <class K>
void set_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

/// A type carrier for dispatch: `dispatch_float(t, [&](auto tag) { using T = typename decltype(tag)::type; ... })`.
template <class T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<float>) or f(TypeTag<bf16>) for a floating activation dtype; other dtypes are an internal error.
template <class F>
void dispatch_float(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::bf16: f(TypeTag<bf16>{}); return;
    default: TRAINER_CHECK(false, "{}: dtype {} is not f32 or bf16", what, dtype_name(t));
  }
}

/// Grid size for grid-stride elementwise kernels over n elements: one block per `threads` elements, capped at a few
/// waves of the GPU (past that, each thread loops over several elements).
inline unsigned elementwise_grid(int64_t n, int threads) {
  const int64_t blocks = ceil_div<int64_t>(n, threads);
  constexpr int64_t kMaxBlocks = 132 * 32;  // H200: 132 SMs; 32 blocks each is past full occupancy (8 x 256 thr.)
  return unsigned(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

#ifdef __CUDACC__
// ---- device helpers -----------------------------------------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __bfloat162float(x); }

/// float -> T with round-to-nearest-even for bf16 (__float2bfloat16), identity for float.
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) { return __float2bfloat16(x); }

/// Sum over the 32 lanes of a warp; every lane gets the result. All 32 lanes must be present.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// `shared` needs 32 elements. Contains __syncthreads: every thread of the block must call it.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : T(0);
  return warp_sum(v);
}

/// Online-softmax pair (running max m, sum s of exp(x - m)); merge is associative up to rounding.
/// (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax", arXiv:1805.02867, Alg. 3.)
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum maxsum_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};  // 0 + 0, or a NaN sum carried on
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
/// Merges MaxSum over the block (same rules as block_sum); `shared` needs 32 entries.
__device__ __forceinline__ MaxSum block_maxsum(MaxSum v, MaxSum* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = maxsum_merge(v, w);
  }
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < nwarps ? shared[lane] : MaxSum{-INFINITY, 0.f};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = maxsum_merge(v, w);
  }
  return v;
}
#endif  // __CUDACC__

}  // namespace trainer
