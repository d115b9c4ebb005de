// AdamW's per-step values: the ones that change with the step number t or the learning rate. They are computed on
// the host in fp64 (Backend's adamw_step_values) and the CUDA kernels can read them from device memory (AdamW
// uploads them once per step, optim/adamw.cpp), so that a step captured in a CUDA graph replays with each step's own
// values instead of the captured ones. Plain C++: included by backend.h and by kernels/adamw.cuh.
#pragma once
#include <cstdint>

namespace trainer {

struct AdamWStepValues {
  float decay;            // lr * weight_decay
  float step_size;        // lr * sqrt(1 - beta2^t) / (1 - beta1^t)
  uint64_t rounding_key;  // bf16_bits::rounding_key(seed, t): stochastic rounding's per-step key
};

}  // namespace trainer
