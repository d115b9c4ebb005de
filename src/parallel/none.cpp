// Strategy "none": one process owns everything; no communication.
#include <cmath>

#include "optim/adamw.h"
#include "parallel/strategy.h"

namespace trainer {

namespace {
class NoneStrategy final : public Strategy {
 public:
  NoneStrategy(const RunConfig& cfg, Backend& be) : cfg_(cfg), be_(be) {}
  std::string name() const override { return "none"; }
  void setup(Model& model) override {
    model_ = &model;
    adamw_ = std::make_unique<AdamW>(be_, model.flat_size(), cfg_.optimizer);
  }
  void finish_backward() override {}
  double grad_norm() override { return std::sqrt(be_.sum_squares(model_->grads())); }
  double optimizer_step(double lr, double grad_scale, bool want_norm) override {
    Tensor work = model_->act_dtype() == DType::f32 ? Tensor() : model_->params_work();
    const double sumsq = adamw_->step(model_->params(), model_->grads(), work, lr, grad_scale, want_norm);
    return want_norm ? std::sqrt(sumsq) : std::nan("");
  }
  size_t optimizer_state_bytes() const override { return adamw_ ? adamw_->state_bytes() : 0; }
  OptimizerState optimizer_state() override {
    return {adamw_->state_tensors(), {{0, 0, model_->layout().total()}}, false, adamw_.get()};
  }

 private:
  const RunConfig& cfg_;
  Backend& be_;
  Model* model_ = nullptr;
  std::unique_ptr<AdamW> adamw_;
};
}  // namespace

std::unique_ptr<Strategy> make_none_strategy(const RunConfig& cfg, Backend& be) {
  return std::make_unique<NoneStrategy>(cfg, be);
}

}  // namespace trainer
