// AdamW launchers over flat parameter, gradient and moment arrays: fp32 (with an optional working copy written in the
// same pass) or bf16 storage (rounded once per element, to nearest even or stochastically).
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

#include "backend/adamw_step.h"

namespace trainer::kernels {

/// Per-step constants of the update, computed on the host in fp64 (see adamw.cu). Set the fields by name
/// (CudaBackend's kernel_step): a positional initializer would shift with a new field.
struct AdamWStep {
  float beta1, beta2, eps;
  float one_minus_beta1, one_minus_beta2;  // 1 - beta in fp64, then rounded (not 1 - the rounded beta)
  float decay;       // lr * weight_decay
  float step_size;   // lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  float grad_scale;  // g is multiplied by this first
  /// Device memory with this step's decay, step_size and rounding key, read by every thread in place of the fields
  /// above and of StochasticRounding::key (a captured step replays with each step's values), or null.
  const AdamWStepValues* per_step = nullptr;
  /// Device float multiplying grad_scale (the clip factor computed on the device), or null.
  const float* grad_scale_by = nullptr;
};

/// Stochastic rounding of the updated p on the bf16 path (backend/bf16.h): element i of a call gets the random bits
/// rounding_bits(key, index_offset + i), key = rounding_key(seed, t).
struct StochasticRounding {
  uint64_t key;
  int64_t index_offset;
};

/// One AdamW step on n elements of p, m, v (updated) from g; p_work (f32 or bf16, may be null) receives the updated p.
/// If sumsq_out is non-null, *sumsq_out (device, fp64) = sum g^2 of g as given (before grad_scale), accumulated in
/// fp64 over a fixed grid (per-block partials in `partials`, kReduceMaxBlocks doubles, then reduce_partials): the
/// same value on every run.
void adamw(float* p, const float* g, float* m, float* v, void* p_work, DType t_work, int64_t n, const AdamWStep& a,
           double* partials, double* sumsq_out, cudaStream_t s);

/// The same step on bf16 storage: p, g, m, v bf16 [n] (any 2-byte-aligned starts), each element loaded to fp32,
/// updated with adamw's fp32 formula, and p, m, v rounded once each: to nearest even, or p stochastically when sr is
/// non-null. The result of an element does not depend on n, on the pointers' alignment or on the launch: one code
/// path for every element. sumsq_out / partials as in adamw (fixed grid for a given n and alignment).
void adamw_bf16(bf16* p, const bf16* g, bf16* m, bf16* v, int64_t n, const AdamWStep& a, const StochasticRounding* sr,
                double* partials, double* sumsq_out, cudaStream_t s);

#ifdef __CUDACC__
/// The per-step values from device memory when the launch has them (AdamWStep::per_step), and the device clip
/// factor folded into grad_scale. Every AdamW kernel (adamw.cu, the dW GEMM's epilogue in dw_adamw/) starts so.
__device__ __forceinline__ void load_per_step(AdamWStep& a) {
  if (a.per_step) {
    a.decay = a.per_step->decay;
    a.step_size = a.per_step->step_size;
  }
  if (a.grad_scale_by) a.grad_scale *= *a.grad_scale_by;
}

/// The update of one element (the formula at the top of adamw.cu): p, m, v updated in place from g (fp32); returns
/// the new p. One definition for every kernel that updates parameters, so that they agree on the formula (each
/// compiles it into its own code, so FMA contraction may still differ between them in the last bit).
__device__ __forceinline__ float adamw_one(float& p, float g, float& m, float& v, const AdamWStep& a) {
  g *= a.grad_scale;
  float pv = p - a.decay * p;
  const float mv = a.beta1 * m + a.one_minus_beta1 * g;
  const float vv = a.beta2 * v + a.one_minus_beta2 * g * g;
  pv -= a.step_size * mv / (sqrtf(vv) + a.eps);
  p = pv;
  m = mv;
  v = vv;
  return pv;
}
#endif

}  // namespace trainer::kernels
