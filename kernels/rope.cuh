// Rotary position embedding launcher, in place on the q and k parts of qkv [B*T, 3D] (f32 or bf16).
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// table [T, d_head/2] of (cos, sin) pairs (f32, 2 * T * d_head/2 floats, device) of the angles t * theta^(-2i/d_head),
/// each computed in fp64 and rounded once.
void rope_table(float* table, int T, int d_head, double theta, cudaStream_t s);

/// Rotates pairs (2i, 2i+1) of every head of q (columns 0..D-1) and k (D..2D-1) of row n = b*T + t by the angle
/// of table[t, i] (negated when inverse). rows = B*T; D = H * d_head; d_head even; table from rope_table(T, d_head).
void rope(void* qkv, DType t, const float* table, int64_t rows, int T, int H, int d_head, bool inverse,
          cudaStream_t s);

}  // namespace trainer::kernels
