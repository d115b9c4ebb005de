// AdamW state over a flat range of the parameter layout (the whole model, or one rank's shard under ZeRO-1).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"

namespace trainer {

class AdamW {
 public:
  /// AdamW for `numel` parameters whose m and v are `state_dtype`: f32, or bf16 for bf16_pure (then p and g are bf16
  /// too and the update is computed in fp32 and rounded once). `seed` feeds stochastic rounding
  /// (cfg.stochastic_rounding, bf16 only). m and v exist from allocate_state() on: a run without updates (bench.phase
  /// forward / forward_backward) never holds them, as PyTorch's optimizer makes its state at the first step.
  AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg, DType state_dtype = DType::f32, uint64_t seed = 0);
  /// Allocates m and v (zeroed, Category::optimizer) unless they exist. The train job calls it at set-up for a run
  /// with updates (jobs/train_setup.cpp); begin_step and state_tensors call it too.
  void allocate_state();
  /// Opens step t + 1 at learning rate lr (allocate_state first): increments the step count t (from 1) and uploads the
  /// step's values (decay, step_size, rounding key: backend/adamw_step.h) to the device copy the kernels read (a copy
  /// from the host: syncs; call it before a graph capture or replay, never inside one).
  void begin_step(double lr);
  /// The update of the open step over p, g ([numel], the state dtype); g is scaled by grad_scale first (clipping).
  /// p_work (bf16 copy of f32 p, or empty) is refreshed in the same pass. With want_sumsq, returns sum g^2 (g as
  /// given) read in the same pass (syncs), or, when sumsq_to is non-null (a device f64 on cuda, host on cpu), writes
  /// it there without a sync and returns 0; else returns 0. grad_scale_by (device float, or null) multiplies
  /// grad_scale (a clip factor computed on the device: Backend::clip_factor_to). Enqueues only (capturable) unless
  /// the sum is returned.
  double update(Tensor p, const Tensor& g, Tensor p_work, double grad_scale, bool want_sumsq = false,
                double* sumsq_to = nullptr, const float* grad_scale_by = nullptr);
  /// The open step's update of elements [offset, offset + p.numel()) of the state with g (optimizer.in_backward: one
  /// unit at a time; no clipping). When sumsq_to is non-null the sum of g^2 is written there without a sync.
  void step_range(int64_t offset, Tensor p, const Tensor& g, Tensor p_work, double* sumsq_to);
  /// The open step's update of one weight matrix at elements [offset, offset + M N) with its gradient computed in the
  /// same call, g = dYᵀ X (dY [K, M], X [K, N]; Backend::matmul_dw_adamw, optimizer.in_gemm), plus g_buf when
  /// `accumulate` (the step's earlier microbatches' or chunks' sum, M N elements of p's dtype); g_buf, when given, is
  /// the gradient's slot and may be overwritten: p (and p_work) the weight's [M N] slices. sumsq_to as in step_range.
  void step_matrix(int64_t offset, Tensor p, Tensor p_work, const Tensor& dY, const Tensor& X, double* sumsq_to,
                   Tensor g_buf = {}, bool accumulate = false);

  int64_t steps_taken() const { return t_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }  // held now (0 before allocate_state)
  size_t full_state_bytes() const { return 2 * size_t(numel_) * dtype_size(dtype_); }  // m and v once made
  DType state_dtype() const { return dtype_; }
  /// The state as named device tensors [numel] in their stored dtype ("m", "v"; allocate_state first): checkpoints
  /// copy them out and back in place (jobs/train_checkpoint.cpp).
  std::vector<std::pair<std::string, Tensor>> state_tensors();
  /// Sets the step count t (a resume: the next step() uses t + 1).
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  AdamWArgs args(double grad_scale) const;  // the open step's (lr_, t_)
  Backend& be_;
  int64_t numel_;
  OptimizerCfg cfg_;
  DType dtype_;
  uint64_t seed_;
  Buffer m_, v_;
  bool state_allocated_ = false;
  Buffer step_values_;  // AdamWStepValues of the open step, on the device (Category::optimizer)
  int64_t t_ = 0;
  double lr_ = 0;
};

}  // namespace trainer
