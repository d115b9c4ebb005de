// Deterministic reductions of a flat array to one fp64 number on the device: sum and sum of squares.
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

#include "backend/cuda_sizes.h"

namespace trainer::kernels {

/// Partial sums the reduction needs in `partials` (doubles); backend/cuda_sizes.h holds the number (the planner
/// mirrors the allocation).
constexpr int kReduceMaxBlocks = cuda_sizes::kReduceMaxBlocks;

/// out[0] = sum_i x[i] (square = false) or sum_i x[i]^2 (square = true), accumulated in fp64. x f32 or bf16 [n].
/// Two stages with a block count that depends on n only (per-block partials in `partials`, then one block sums them
/// in index order), so the result is the same on every run. out is a device pointer.
void reduce_sum(double* out, const void* x, DType t, int64_t n, bool square, double* partials, cudaStream_t s);

/// out[0] = sum of partials[0..count) with reduce_sum's fixed tree (stage 2 alone); count <= kReduceMaxBlocks.
void reduce_partials(double* out, const double* partials, int count, cudaStream_t s);

/// factor[0] = float(min(1, max_norm / (sqrt(sumsq[0]) + 1e-6))), in fp64 (IEEE sqrt and division, so the same
/// value as optim/schedule.cpp's clip_factor on the host). One thread; device pointers.
void clip_factor(float* factor, const double* sumsq, double max_norm, cudaStream_t s);

}  // namespace trainer::kernels
