// Strategy: how gradients and optimizer state are shared between data-parallel ranks.
//
// The train loop calls, per step: model.zero_grads(); for each microbatch forward + backward(hook) where the hook is
// on_unit_ready(unit) on the last microbatch only; then finish_backward(); then, with clipping, grad_norm() and
// optimizer_step(lr, clip factor), or without, optimizer_step(lr, 1, want_norm = true) (the norm read in AdamW's pass).
// Gradients accumulate scaled by 1 / (tokens of the global batch), so a sum over ranks is the exact global mean.
// Implementations: none (one process), ddp_naive, ddp_flat, ddp_overlap, ddp_bucketed, zero1 (src/parallel/*).
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"

namespace trainer {

class Communicator;

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  /// Once at start: make every rank's weights rank 0's (broadcast) and set up buckets/shards and optimizer state.
  virtual void setup(Model& model) = 0;
  /// During the last microbatch's backward: unit u's gradient range is complete (model.h: units and layout).
  virtual void on_unit_ready(int unit) {}
  /// After the last microbatch's backward: afterwards every gradient this rank needs is reduced over ranks.
  virtual void finish_backward() = 0;
  /// Global L2 norm of the (reduced) gradient over all ranks and shards; equals the one-process value. (syncs)
  virtual double grad_norm() = 0;
  /// AdamW step with learning rate lr and gradients scaled by grad_scale; afterwards all ranks hold the same weights
  /// (and the bf16 working copy is refreshed). With want_norm, returns the global gradient norm (the value
  /// grad_norm() would give before the step) computed in the same pass over the gradients; else NaN. (syncs if asked)
  virtual double optimizer_step(double lr, double grad_scale, bool want_norm = false) = 0;
  /// Makes every rank's fp32 master weights complete (collective). Only zero1 in mixed precision needs it: it keeps
  /// just its shard of the master weights current and gathers the bf16 working copy. Call before reading the
  /// weights on the host (checkpoints).
  virtual void gather_params() {}
  /// Bytes of optimizer state this rank holds.
  virtual size_t optimizer_state_bytes() const = 0;
  /// Milliseconds of communication in the last step (issued to completed) and the part not hidden behind compute.
  virtual double comm_ms() const { return 0; }
  virtual double comm_exposed_ms() const { return 0; }
};

/// The strategy named by cfg.parallel.strategy. comm may be null only for "none".
std::unique_ptr<Strategy> make_strategy(const RunConfig& cfg, Backend& be, Communicator* comm);

}  // namespace trainer
