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
  /// Allocates m and v (fp32, zeroed, Category::optimizer) for `numel` parameters.
  AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg);
  /// One step over p, g (f32 [numel]) with learning rate lr; g is scaled by grad_scale first (clipping).
  /// p_work (bf16 copy of p, or empty) is refreshed in the same pass. Increments the step count t (from 1).
  /// With want_sumsq, returns sum g^2 (g as given) read in the same pass (syncs); else 0.
  double step(Tensor p, const Tensor& g, Tensor p_work, double lr, double grad_scale, bool want_sumsq = false);
  int64_t steps_taken() const { return t_; }
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  /// The state as named device tensors [numel] in their stored dtype ("m", "v"): checkpoints copy them out and back
  /// in place (jobs/train_checkpoint.cpp).
  std::vector<std::pair<std::string, Tensor>> state_tensors() const;
  /// Sets the step count t (a resume: the next step() uses t + 1).
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  Backend& be_;
  int64_t numel_;
  OptimizerCfg cfg_;
  Buffer m_, v_;
  int64_t t_ = 0;
};

}  // namespace trainer
