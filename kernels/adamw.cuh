// AdamW launcher over flat f32 parameter, gradient and moment arrays, with an optional working copy written in the
// same pass.
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// Per-step constants of the update, computed on the host in fp64 (see adamw.cu).
struct AdamWStep {
  float beta1, beta2, eps;
  float decay;       // lr * weight_decay
  float step_size;   // lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  float grad_scale;  // g is multiplied by this first
};

/// One AdamW step on n elements of p, m, v (updated) from g; p_work (f32 or bf16, may be null) receives the updated p.
/// If sumsq_out is non-null, *sumsq_out (device, fp64) = sum g^2 of g as given (before grad_scale), accumulated in
/// fp64 over a fixed grid (per-block partials in `partials`, kReduceMaxBlocks doubles, then reduce_partials): the
/// same value on every run.
void adamw(float* p, const float* g, float* m, float* v, void* p_work, DType t_work, int64_t n, const AdamWStep& a,
           double* partials, double* sumsq_out, cudaStream_t s);

}  // namespace trainer::kernels
