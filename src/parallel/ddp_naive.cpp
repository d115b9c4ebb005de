// Strategy "ddp_naive": after the backward pass, one synchronous all_reduce (sum) per parameter tensor, in layout
// order. The simplest correct DDP (CS336 assignment 2, "naive DDP"): many small collectives, no overlap.
#include "parallel/data_parallel.h"

namespace trainer {

namespace {
class DdpNaive final : public DdpStrategy {
 public:
  DdpNaive(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm)
      : DdpStrategy(parallel, optimizer, be, comm, "ddp_naive") {}

  void finish_backward() override {
    timer_.begin_step();
    timer_.begin_exposed();
    for (const ParamInfo& p : model_->layout().params())
      reduce({{p.offset, p.offset + p.numel}}, /*async=*/false);
    timer_.end_exposed();
    timer_.end_step();
  }

 protected:
  void setup_layout() override {
    std::vector<int64_t> layout;
    for (const ParamInfo& p : model_->layout().params()) {
      layout.push_back(p.offset);
      layout.push_back(p.numel);
    }
    check_same_layout(comm_, "ddp_naive parameter tensors", layout);
  }
};
}  // namespace

std::unique_ptr<Strategy> make_ddp_naive_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer,
                                                  Backend& be, Communicator* comm) {
  return std::make_unique<DdpNaive>(parallel, optimizer, be, comm);
}

}  // namespace trainer
