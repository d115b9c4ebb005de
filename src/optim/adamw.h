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
  /// Allocates m and v (zeroed, Category::optimizer) for `numel` parameters in `state_dtype`: f32, or bf16 for
  /// bf16_pure (then p and g are bf16 too and the update is computed in fp32 and rounded once). `seed` feeds
  /// stochastic rounding (cfg.stochastic_rounding, bf16 only).
  AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg, DType state_dtype = DType::f32, uint64_t seed = 0);
  /// One step over p, g ([numel], the state dtype) with learning rate lr; g is scaled by grad_scale first (clipping).
  /// p_work (bf16 copy of f32 p, or empty) is refreshed in the same pass. Increments the step count t (from 1).
  /// With want_sumsq, returns sum g^2 (g as given) read in the same pass (syncs); else 0.
  double step(Tensor p, const Tensor& g, Tensor p_work, double lr, double grad_scale, bool want_sumsq = false);

  /// The same update in pieces (optimizer.in_backward): begin_step() increments t once per step, then
  /// step_range() updates elements [offset, offset + p.numel()) of the state with g (no clipping). When sumsq_to is
  /// non-null (a device f64 on cuda, host on cpu) the sum of g^2 is written there without a sync.
  void begin_step() { ++t_; }
  void step_range(int64_t offset, Tensor p, const Tensor& g, Tensor p_work, double lr, double* sumsq_to);

  int64_t steps_taken() const { return t_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  DType state_dtype() const { return dtype_; }
  /// The state as named device tensors [numel] in their stored dtype ("m", "v"): checkpoints copy them out and back
  /// in place (jobs/train_checkpoint.cpp).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  /// Sets the step count t (a resume: the next step() uses t + 1).
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  AdamWArgs args(double lr, double grad_scale) const;
  Backend& be_;
  int64_t numel_;
  OptimizerCfg cfg_;
  DType dtype_;
  uint64_t seed_;
  Buffer m_, v_;
  int64_t t_ = 0;
};

}  // namespace trainer
