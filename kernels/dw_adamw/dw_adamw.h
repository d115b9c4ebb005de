// The weight gradient of a linear layer and its AdamW update in one kernel (Hopper, sm_90a): dW = dYᵀ X is summed in
// the tensor cores' fp32 accumulators and each tile of it goes straight into AdamW, so the fp32 gradient is never
// written to or read from memory (8 of AdamW's 30 bytes a parameter) and AdamW's memory traffic runs under the next
// tile's products (design and counts: kernels/dw_adamw/NOTES.md). Plain C++: the launcher's interface.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "adamw.cuh"

namespace trainer::kernels {

/// One weight's dW = dYᵀ X and update. dY [K, M] and X [K, N] bf16 row-major (row strides ld_dy, ld_x elements; K is
/// the tokens, M = d_out, N = d_in), so dW is [M, N] like the weight. p, m, v fp32 [M, N] with row stride ld (the
/// optimizer's flat arrays: ld = N). Each element: g = dW (fp32 accumulation of the bf16 products over K, in tile
/// order; plus grad_in when given), then kernels::adamw's update (adamw_one, the same per-step values) and p_work =
/// bf16(p) when p_work is given.
struct DwAdamWArgs {
  const bf16* dy = nullptr;
  int64_t ld_dy = 0;
  const bf16* x = nullptr;
  int64_t ld_x = 0;
  int M = 0, N = 0, K = 0;
  float* p = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  bf16* p_work = nullptr;  // [M, N] row stride ld, or null
  int64_t ld = 0;
  /// Optional: g itself, fp32 [M, N] row stride ld (checks, and a plain fp32-output dW product when update is false).
  float* grad = nullptr;
  /// Optional: a gradient the product adds to, fp32 [M, N] row stride ld (the step's earlier microbatches): then
  /// g = grad_in + dYᵀ X. May be `grad` itself (each element is read before it is written).
  const float* grad_in = nullptr;
  bool update = true;  // false: no AdamW (p, m, v, p_work untouched; grad must be given)
  /// Optional: where the sum of g² (g as given, before grad_scale; fp64, device) is written, as kernels::adamw's
  /// sumsq_out: per-CTA sums into `partials` (kReduceMaxBlocks doubles of scratch), then reduce_partials. The same
  /// value on every run on the same GPU (the CTAs' tiles depend on its SM count).
  double* sumsq_out = nullptr;
  double* partials = nullptr;
  AdamWStep a{};
};

/// Whether dw_adamw can run this problem on this device: an sm_90 GPU and a build with the Hopper kernels; M, N >= 1,
/// K >= 1; N, ld multiples of 4, ld >= N; ld_dy >= M, ld_x >= N, both multiples of 8 (16-byte TMA rows); dy, x
/// 16-byte aligned, p, m, v, grad, grad_in 16-byte aligned, p_work 8-byte aligned; partials with sumsq_out. Fills `why`
/// (when given) with the first reason it cannot.
bool dw_adamw_supported(const DwAdamWArgs& a, const char** why = nullptr);

/// Enqueues the fused product and update on `s`. Errors: an unsupported problem (dw_adamw_supported) throws
/// std::invalid_argument; CUDA errors abort (CUDA_CHECK). Captures into CUDA graphs (the tensor maps are kernel
/// parameters; the per-step values come from AdamWStep::per_step when set).
void dw_adamw(const DwAdamWArgs& a, cudaStream_t s);

}  // namespace trainer::kernels
