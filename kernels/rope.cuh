// Rotary position embedding launcher, in place on the q and k parts of qkv [B*T, 3D] (f32 or bf16).
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// Rotates pairs (2i, 2i+1) of every head of q (columns 0..D-1) and k (D..2D-1) of row n = b*T + t by the angle
/// t * theta^(-2i/d_head) (negated when inverse). rows = B*T; D = H * d_head; d_head even.
void rope(void* qkv, DType t, int64_t rows, int T, int H, int d_head, double theta, bool inverse, cudaStream_t s);

}  // namespace trainer::kernels
