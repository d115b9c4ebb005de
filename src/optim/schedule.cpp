#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace trainer {

double learning_rate(const OptimizerCfg& o, int64_t it, int64_t total_steps) {
  if (o.schedule == "constant") return o.lr;
  const double warm = o.warmup_steps, cyc = o.cosine_steps > 0 ? o.cosine_steps : double(total_steps);
  const double t = double(it);
  if (t < warm) return o.lr * t / warm;
  if (t > cyc) return o.min_lr;
  if (cyc <= warm) return o.lr;
  return o.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * (t - warm) / (cyc - warm))) * (o.lr - o.min_lr);
}

double clip_factor(double grad_norm, const std::optional<double>& max_norm) {
  if (!max_norm) return 1.0;
  return std::min(1.0, *max_norm / (grad_norm + 1e-6));
}

}  // namespace trainer
