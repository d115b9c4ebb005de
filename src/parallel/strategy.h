// Strategy: where weights, gradients and optimizer state live, and how they are shared between data-parallel ranks.
//
// A Strategy is the model's ParamResidency (model/residency.h): the model gets each unit's weights through acquire()
// and hands its gradient back at release(). The default (none, ddp_*, zero1) serves views of the Model's full flat
// buffers and, on the step's last microbatch, turns the release of a unit's backward into on_unit_ready(unit).
//
// The train step (jobs/train_step.h) calls, per step: begin_step(lr, optimizer); model.zero_grads(); for each
// microbatch begin_microbatch(m, n), forward + backward; then finish_backward(); then clipped_optimizer_step(lr,
// max_grad_norm) (by default: with clipping grad_norm() and optimizer_step(lr, clip factor), without
// optimizer_step(lr, 1, want_norm = true), the norm read in AdamW's pass); then step_grad_norm().
// Gradients accumulate scaled by 1 / (tokens of the global batch), so a sum over ranks is the exact global mean.
// Implementations: none (one process), ddp_naive, ddp_flat, ddp_overlap, ddp_bucketed, zero1, fsdp (src/parallel/*).
#pragma once
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"
#include "model/residency.h"

namespace trainer {

class Communicator;
class AdamW;

/// Elements [local_begin, local_begin + count) of a rank's optimizer state hold elements [flat_begin, flat_begin +
/// count) of the model's flat layout (ParamLayout offsets: the same for every world size and strategy).
struct FlatRange {
  int64_t flat_begin = 0, local_begin = 0, count = 0;
};

/// One rank's optimizer state, for checkpoints (jobs/train_checkpoint.cpp): device tensors of one length each, in
/// their stored dtype (AdamW's m and v; a master copy of the weights where it is not what download_param returns),
/// which layout elements they hold (elements in no range are padding, zero), and the AdamW whose step count goes with
/// them.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::vector<FlatRange> ranges;
  bool replicated = false;  // every rank holds the same state (DDP): only rank 0's is written
  AdamW* adamw = nullptr;
};

class Strategy : public ParamResidency {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  /// Binds the strategy to `model` (the model then reaches its weights through acquire / release) and calls setup().
  void attach(Model& model);
  /// Whether the Model should allocate the full flat parameter, bf16 copy and gradient buffers (false: fsdp keeps
  /// shards of its own).
  virtual bool full_params() const { return true; }
  /// Whether the Model should allocate the full flat gradients (false: the strategy hands each unit's gradient
  /// buffer out in acquire(); fsdp's staging buffers, none with optimizer.in_backward).
  virtual bool full_grads() const { return full_params(); }
  /// At the start of a step (before its first microbatch): the step's learning rate, and whether it ends with an
  /// optimizer step (optimizer.in_backward updates each unit during the backward).
  virtual void begin_step(double lr, bool optimizer) {
    (void)lr;
    (void)optimizer;
  }
  /// Before microbatch m (0-based) of n_micro in the step.
  virtual void begin_microbatch(int m, int n_micro) {
    micro_ = m;
    n_micro_ = n_micro;
  }
  /// ParamResidency, default: views of the Model's full buffers (Model::full_view); releasing a backward or
  /// forward_backward use on the step's last microbatch calls on_unit_ready(unit).
  UnitView acquire(int unit, UnitPass pass) override;
  void release(int unit, UnitPass pass) override;
  /// Once at start: make every rank's weights rank 0's (broadcast) and set up buckets/shards and optimizer state.
  virtual void setup(Model& model) = 0;
  /// During the last microbatch's backward: unit u's gradient range is complete (model.h: units and layout).
  virtual void on_unit_ready(int unit) {}
  /// After the last microbatch's backward: afterwards every gradient this rank needs is reduced over ranks.
  virtual void finish_backward() = 0;
  /// Global L2 norm of the (reduced) gradient over all ranks and shards; equals the one-process value. (syncs)
  virtual double grad_norm() = 0;
  /// AdamW step with learning rate lr and gradients scaled by grad_scale; afterwards all ranks hold the same weights
  /// (and the bf16 working copy is refreshed). With want_norm, the global gradient norm (the value grad_norm() would
  /// give before the step) is computed in the same pass over the gradients, for step_grad_norm(). none enqueues only
  /// (its step can be captured in a CUDA graph); the data-parallel strategies sync when the norm is asked for.
  virtual void optimizer_step(double lr, double grad_scale, bool want_norm = false) = 0;
  /// The norm of the last optimizer_step(want_norm = true), NaN when it was not asked for. (syncs where the norm is
  /// still on the device)
  virtual double step_grad_norm() { return step_norm_; }
  /// The step's update as the train step runs it: with clipping at max_grad_norm, by default grad_norm() (syncs),
  /// then optimizer_step(lr, clip_factor(norm)); without, optimizer_step(lr, 1, want_norm = true). The norm
  /// (before clipping) then comes from step_grad_norm(). none overrides it to clip on the device (no sync).
  virtual void clipped_optimizer_step(double lr, std::optional<double> max_grad_norm);
  /// Makes every rank's fp32 master weights complete (collective). Only zero1 in mixed precision needs it: it keeps
  /// just its shard of the master weights current and gathers the bf16 working copy. Call before reading the
  /// weights on the host (checkpoints). fsdp makes gathered_param's buffer here (OutOfMemory before any gather).
  virtual void gather_params() {}
  /// One parameter (or its gradient), complete, on the device in its stored dtype (fp32, or bf16 where the model
  /// keeps bf16 weights), valid until the next call or the next step; after gather_params(). Collective where the
  /// strategy shards the weights (fsdp all-gathers the parameter's unit into a buffer the size of its largest unit):
  /// every rank calls it for the same parameters in the same order (exactly when full_params() is false). A
  /// checkpoint reads every parameter through it, and so does the planner's dry run of a run that writes one, so
  /// what it allocates is in the plan. Default: a view of the model's storage.
  virtual Tensor gathered_param(const ParamInfo& p, bool grad = false);
  /// gathered_param copied to the host as fp32 (checkpoints).
  std::vector<float> download_param(const ParamInfo& p, bool grad = false);
  /// This rank's optimizer state (OptimizerState), read and written in place by checkpoints; valid after setup().
  virtual OptimizerState optimizer_state() = 0;
  /// Bytes of optimizer state this rank holds.
  virtual size_t optimizer_state_bytes() const = 0;
  /// Milliseconds of communication in the last step (issued to completed) and the part not hidden behind compute.
  virtual double comm_ms() const { return 0; }
  virtual double comm_exposed_ms() const { return 0; }

 protected:
  Model* attached_ = nullptr;  // set by attach()
  int micro_ = 0, n_micro_ = 1;
  double step_norm_ = std::numeric_limits<double>::quiet_NaN();  // step_grad_norm()'s default (optimizer_step sets it)
};

/// optimizer.in_gemm's choice (strategy none): per parameter of `layout`, whether the product that computes its
/// gradient updates it: the matrices of the blocks and the head (not the embedding, whose gradient is a scatter)
/// whose product has at least `min_elements` elements (ParamInfo::product_numel; k, v, w3 go with their product).
std::vector<char> in_gemm_fused(const ParamLayout& layout, int64_t min_elements);
/// The products it so fuses, and all products of the blocks and the head (the plan's and the log's "N of M").
std::pair<int, int> in_gemm_fused_products(const ParamLayout& layout, int64_t min_elements);

/// `n` f64 slots on the device (Category::optimizer), zeroed: where AdamW writes each update's sum of g^2
/// (AdamW::step_range's sumsq_to; optimizer.in_backward's per-unit updates, none and fsdp).
Buffer make_sumsq_slots(Backend& be, int64_t n);
/// (syncs) The sum of slots [0, n) of such a buffer, added in slot order (unit order: the same on every run).
double sum_sumsq_slots(Backend& be, const Buffer& slots, size_t n);

/// The strategy named by cfg.parallel.strategy. comm may be null only for "none".
std::unique_ptr<Strategy> make_strategy(const RunConfig& cfg, Backend& be, Communicator* comm);

}  // namespace trainer
