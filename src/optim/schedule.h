// Learning-rate schedule and gradient clipping (CS336 basics; DESIGN.md).
#pragma once
#include <cstdint>
#include <optional>

#include "config/config.h"

namespace trainer {

/// Learning rate at iteration `it` (0-based step). "constant": lr. "cosine": linear warm-up lr*it/warmup for
/// it < warmup; min_lr for it > cosine_steps; otherwise min + 0.5 (1 + cos(pi (it - warmup) / (cosine - warmup)))
/// (lr - min). cosine_steps 0 means total_steps.
double learning_rate(const OptimizerCfg& o, int64_t it, int64_t total_steps);

/// Factor applied to every gradient for clipping by global norm: min(1, max_norm / (norm + 1e-6)); 1 without clipping.
double clip_factor(double grad_norm, const std::optional<double>& max_norm);

}  // namespace trainer
