// One training step's device work, shared by the train job (jobs/train.cpp) and the planner (plan/planner.cpp), so
// that what the planner simulates on the meta backend is exactly what a run enqueues.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"
#include "parallel/strategy.h"

namespace trainer {

/// The shape of a step on this rank: n_micro microbatches of `micro` rows of seq_len tokens; global_tokens is the
/// global batch's token count (the loss is the mean over it).
struct StepShape {
  int n_micro = 1, micro = 1, seq_len = 1;
  int64_t global_tokens = 1;
  bool backward = true;   // phase forward_backward or train_step
  bool optimizer = true;  // phase train_step
};

/// Events recorded on the compute stream during the step, for the phase timings (all optional: null skips).
/// start; per microbatch forward end and backward end; comm end (after finish_backward); optimizer end.
struct StepEvents {
  Event* start = nullptr;
  std::vector<Event*> forward_end, backward_end;  // [n_micro] each
  Event* comm_end = nullptr;
  Event* optimizer_end = nullptr;
};

/// The host part of a step, before its device work: the strategy's begin_step (the learning rate; AdamW's step
/// values uploaded to the device, which syncs). Outside any graph capture: a captured step replays after it.
void begin_train_step(Strategy& strategy, const StepShape& s, double lr);

/// The device work of one step (after begin_train_step; the step's tokens already uploaded: Model::begin_step_losses,
/// set_step_tokens): each microbatch's forward (and backward), strategy.finish_backward(), and AdamW at learning rate
/// lr (with clipping at max_grad_norm when set: Strategy::clipped_optimizer_step); the gradient norm is then the
/// strategy's step_grad_norm(). With strategy none nothing here synchronises (it clips on the device), so it can be
/// captured in a CUDA graph (jobs/train.cpp); the data-parallel strategies sync for the norm.
void enqueue_train_step(Backend& be, Model& model, Strategy& strategy, const StepShape& s, double lr,
                        std::optional<double> max_grad_norm, const StepEvents& ev = {});

/// begin_train_step + enqueue_train_step; returns the global gradient norm (NaN when there is no optimizer step).
/// Syncs where the strategy does (the norm).
double train_step(Backend& be, Model& model, Strategy& strategy, const StepShape& s, double lr,
                  std::optional<double> max_grad_norm, const StepEvents& ev = {});

}  // namespace trainer
