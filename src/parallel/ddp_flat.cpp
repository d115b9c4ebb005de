// Strategy "ddp_flat": after the backward pass, one synchronous all_reduce (sum) of every gradient at once. The
// gradients already live in one flat buffer [flat_size] (model.h), so no copy into a staging buffer is needed
// (CS336 assignment 2, "minimal DDP flat benchmarking": one batched collective instead of one per tensor).
#include "parallel/data_parallel.h"

namespace trainer {

namespace {
class DdpFlat final : public DdpStrategy {
 public:
  DdpFlat(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm)
      : DdpStrategy(parallel, optimizer, be, comm, "ddp_flat") {}

  void finish_backward() override {
    timer_.begin_step();
    timer_.begin_exposed();
    reduce({{0, model_->flat_size()}}, /*async=*/false);
    timer_.end_exposed();
    timer_.end_step();
  }

 protected:
  void setup_layout() override { check_same_layout(comm_, "ddp_flat gradient buffer", {model_->flat_size()}); }
};
}  // namespace

std::unique_ptr<Strategy> make_ddp_flat_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer,
                                                 Backend& be, Communicator* comm) {
  return std::make_unique<DdpFlat>(parallel, optimizer, be, comm);
}

}  // namespace trainer
