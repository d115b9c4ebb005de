// Shared pieces of the data-parallel strategies (ddp_naive, ddp_flat, ddp_overlap, ddp_bucketed, zero1): the start-up
// weight broadcast, the check that a layout (buckets, shards) is the same on every rank, the per-step communication
// timing, and DdpStrategy, the base of the four DDP variants (every rank keeps the full AdamW state).
//
// Gradients arrive pre-scaled by 1 / (tokens of the global batch) (jobs/train_step.cpp), so ReduceOp::sum over the
// ranks gives exactly the global-batch mean gradient that one process would compute.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "optim/adamw.h"
#include "parallel/strategy.h"

namespace trainer {

/// Makes every rank's master weights rank 0's (broadcast of the flat f32 buffer [flat_size]) and refreshes the bf16
/// working copy. Collective.
void broadcast_weights(Model& model, Communicator& comm);

/// Collective over `comm`: each rank hashes `layout` (64-bit FNV-1a over the integers, Fowler-Noll-Vo) and
/// the hashes are all-gathered. If any rank's differs from rank 0's, every rank raises the same RuntimeError naming
/// `what` and the differing ranks, so a mismatch stops the job at start instead of hanging or summing wrong ranges.
void check_same_layout(Communicator& comm, const std::string& what, const std::vector<int64_t>& layout);

/// Communication time of one step, behind Strategy::comm_ms() and comm_exposed_ms().
///  - comm_ms: Communicator::busy_ms() over the step, i.e. time during which at least one collective was in flight
///    (MPI: host clock from issue to the observed completion; NCCL: the collectives' time on the comm stream).
///  - exposed_ms: time the compute timeline stood still because of communication: the sum, over the stretches
///    bracketed by begin_exposed() / end_exposed() (around every wait() and synchronous collective), of the compute
///    stream's elapsed time between an event recorded before and one after. On the CPU the events are host clock
///    readings, so this is the host time spent blocked in collectives; on a GPU it is how long the compute stream
///    stalled (a collective that finished behind compute costs ~0). At most comm_ms: a synchronous collective's
///    bracket also holds the call's own microseconds around its timed span, which are not counted.
/// Both count the tensor collectives only: the host-side scalar sums (zero1's and fsdp's gradient norm) are in
/// neither, as Communicator::busy_ms() leaves them out.
/// A step opens at begin_step() (or the first touch()) and closes at end_step(); the values stay readable until the
/// next step opens. Reading them syncs on the recorded events.
class CommTimer {
 public:
  CommTimer(Backend& be, Communicator& comm) : be_(be), comm_(comm) {}
  void begin_step();
  void touch() {
    if (!open_) begin_step();
  }
  void end_step() { open_ = false; }
  void begin_exposed();
  void end_exposed();
  double comm_ms() const { return comm_.busy_ms(); }
  double exposed_ms() const;

 private:
  Backend& be_;
  Communicator& comm_;
  std::vector<std::unique_ptr<Event>> events_;  // (before, after) pairs, reused every step
  size_t used_ = 0;                             // events recorded this step
  bool open_ = false;
};

/// Base of the DDP strategies: rank 0's weights broadcast at setup, AdamW over the whole flat buffer on every rank,
/// the gradient norm computed locally (after finish_backward every rank holds the same reduced gradient, so the local
/// norm is the global one). Subclasses decide how gradients are reduced: finish_backward() and on_unit_ready().
class DdpStrategy : public Strategy {
 public:
  DdpStrategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm,
              std::string name);
  std::string name() const override { return name_; }
  void setup(Model& model) override;
  void begin_step(double lr, bool optimizer) override;
  double grad_norm() override;
  void optimizer_step(double lr, double grad_scale, bool want_norm) override;
  size_t optimizer_state_bytes() const override { return adamw_ ? adamw_->state_bytes() : 0; }
  /// The whole flat range, the same on every rank (replicated).
  OptimizerState optimizer_state() override;
  double comm_ms() const override { return timer_.comm_ms(); }
  double comm_exposed_ms() const override { return timer_.exposed_ms(); }

 protected:
  /// Called at the end of setup(), after the weights are broadcast: build buckets etc. and check_same_layout().
  virtual void setup_layout() {}
  /// The gradient range [begin, end) (elements of the flat buffer) as a tensor.
  Tensor grad_range(int64_t begin, int64_t end) const { return model_->grads().slice(begin, {end - begin}); }
  /// Sums the gradient ranges [begin, end) (elements of the flat buffer) over ranks in place: one Work, issued
  /// together (NCCL: one group). With parallel.reduce_dtype bf16 they travel as bf16 through the wire buffer
  /// [flat_size] (Communicator::all_reduce_many_via: cast, sum and cast back on the communicator's stream).
  std::unique_ptr<Work> reduce(const std::vector<std::pair<int64_t, int64_t>>& ranges, bool async);

  const ParallelCfg parallel_;    // the config sections this strategy reads (copies)
  const OptimizerCfg optimizer_;
  Backend& be_;
  Communicator& comm_;
  Model* model_ = nullptr;
  CommTimer timer_;

 private:
  std::string name_;
  std::unique_ptr<AdamW> adamw_;
  Buffer wire_;  // bf16 [flat_size] with reduce_dtype bf16, else empty
};

/// The data-parallel strategies and fsdp (one file each; make_strategy picks one): `comm` is the run's Communicator
/// over every rank (not null; owned by the caller, alive as long as the strategy); `be` runs the model and the
/// optimizer. They raise ConfigError for a parallel section they cannot serve (fsdp: reduce_dtype bf16). fsdp's
/// `backward`: whether the run's microbatches go backward (false: bench.phase forward; no gradient accumulator or
/// staging buffer, gather buffers for the forward-only schedule only).
std::unique_ptr<Strategy> make_ddp_naive_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                                  Communicator* comm);
std::unique_ptr<Strategy> make_ddp_flat_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                                 Communicator* comm);
std::unique_ptr<Strategy> make_ddp_overlap_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                                    Communicator* comm);
std::unique_ptr<Strategy> make_ddp_bucketed_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                                     Communicator* comm);
std::unique_ptr<Strategy> make_zero1_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                              Communicator* comm);
std::unique_ptr<Strategy> make_fsdp_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                             Communicator* comm, bool backward);

}  // namespace trainer
