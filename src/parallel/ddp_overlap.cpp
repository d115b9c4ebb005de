// Strategy "ddp_overlap": each parameter tensor's gradient is all-reduced (sum, asynchronously) as soon as the
// backward pass has produced it, i.e. when the model's hook reports its unit complete (the unit's tensors are issued
// together: Communicator::all_reduce_many); finish_backward() waits for all
// of them. Communication of later layers overlaps the backward compute of earlier ones (CS336 assignment 2, "DDP
// overlapping individual parameter communication with backward"; PyTorch DDP without bucketing).
//
// The hook fires on the last microbatch only, so with gradient accumulation gradients are communicated once per step.
// A unit whose hook did not fire (the model skipped it) is launched in finish_backward(), so no gradient is missed.
#include "parallel/data_parallel.h"

namespace trainer {

namespace {
class DdpOverlap final : public DdpStrategy {
 public:
  DdpOverlap(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm)
      : DdpStrategy(parallel, optimizer, be, comm, "ddp_overlap") {}

  void on_unit_ready(int unit) override {
    TRAINER_CHECK(unit >= 0 && unit < int(unit_params_.size()), "ddp_overlap: unit {} outside [0, {})", unit,
                  unit_params_.size());
    timer_.touch();
    launch(unit);
  }

  void finish_backward() override {
    timer_.touch();
    for (int u = int(unit_params_.size()) - 1; u >= 0; --u) launch(u);
    timer_.begin_exposed();
    for (auto& w : pending_) w->wait();
    timer_.end_exposed();
    pending_.clear();
    std::fill(launched_.begin(), launched_.end(), false);
    timer_.end_step();
  }

 protected:
  void setup_layout() override {
    const ParamLayout& layout = model_->layout();
    unit_params_.assign(size_t(layout.num_units()), {});
    launched_.assign(size_t(layout.num_units()), false);
    std::vector<int64_t> desc;
    for (const ParamInfo& p : layout.params()) {
      unit_params_[size_t(p.unit)].push_back(&p);
      desc.insert(desc.end(), {p.unit, p.offset, p.numel});
    }
    check_same_layout(comm_, "ddp_overlap parameter tensors", desc);
  }

 private:
  void launch(int unit) {
    if (launched_[size_t(unit)]) return;
    launched_[size_t(unit)] = true;
    // One all-reduce per parameter tensor, the unit's issued together (NCCL: one group launch, so the small RMSNorm
    // gains cost no launch latency of their own); reverse order inside the unit: its last tensor is finished first.
    const auto& params = unit_params_[size_t(unit)];
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (auto it = params.rbegin(); it != params.rend(); ++it)
      ranges.emplace_back((*it)->offset, (*it)->offset + (*it)->numel);
    pending_.push_back(reduce(ranges, /*async=*/true));
  }

  std::vector<std::vector<const ParamInfo*>> unit_params_;  // [unit] -> its parameter tensors, in layout order
  std::vector<bool> launched_;                              // [unit] all-reduce issued this step
  std::vector<std::unique_ptr<Work>> pending_;
};
}  // namespace

std::unique_ptr<Strategy> make_ddp_overlap_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer,
                                                    Backend& be, Communicator* comm) {
  return std::make_unique<DdpOverlap>(parallel, optimizer, be, comm);
}

}  // namespace trainer
