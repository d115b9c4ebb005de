// Elementwise launchers: fill, cast (f32 <-> bf16), add_inplace, scale, split_tf32. Flat contiguous arrays of n elements.
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// x[i] = value for i < n. t: f32, bf16 (rounded to nearest even) or i32 (value truncated toward zero).
void fill(void* x, DType t, int64_t n, float value, cudaStream_t s);
/// dst[i] = src[i] converted (f32 <-> bf16 round-to-nearest-even; same dtype: a plain copy). f32 or bf16.
void cast(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, cudaStream_t s);
/// x[i] += y[i] in fp32, rounded once into x's dtype. x and y f32 or bf16, each its own dtype.
void add_inplace(void* x, DType tx, const void* y, DType ty, int64_t n, cudaStream_t s);
/// x[i] *= alpha in fp32, stored back in t (f32 or bf16).
void scale(void* x, DType t, int64_t n, float alpha, cudaStream_t s);
/// The 3xTF32 split of fp32 x [n] (NVIDIA CUTLASS's "3xTF32" GEMMs; Ootomo & Yokota 2022, arXiv:2203.03341):
/// hi[i] = x[i] rounded to TF32 (nearest), lo[i] = x[i] - hi[i], both fp32; hi, lo and x must not overlap.
void split_tf32(float* hi, float* lo, const float* x, int64_t n, cudaStream_t s);

}  // namespace trainer::kernels
