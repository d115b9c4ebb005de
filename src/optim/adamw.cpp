#include "optim/adamw.h"

namespace trainer {

AdamW::AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg) : be_(be), numel_(numel), cfg_(cfg) {
  m_ = be_.alloc(size_t(numel) * 4, Category::optimizer);
  v_ = be_.alloc(size_t(numel) * 4, Category::optimizer);
  if (numel > 0) {
    be_.fill(m_.view(DType::f32, {numel}), 0.f);
    be_.fill(v_.view(DType::f32, {numel}), 0.f);
  }
}

double AdamW::step(Tensor p, const Tensor& g, Tensor p_work, double lr, double grad_scale, bool want_sumsq) {
  TRAINER_CHECK(p.numel() == numel_ && g.numel() == numel_, "AdamW: {} parameters, state for {}", p.numel(), numel_);
  ++t_;
  if (numel_ == 0) return 0.0;
  AdamWArgs a;
  a.lr = float(lr);
  a.beta1 = float(cfg_.betas.at(0));
  a.beta2 = float(cfg_.betas.at(1));
  a.eps = float(cfg_.eps);
  a.weight_decay = float(cfg_.weight_decay);
  a.t = t_;
  a.grad_scale = float(grad_scale);
  a.grad_sumsq = want_sumsq;
  return be_.adamw(p, g, m_.view(DType::f32, {numel_}), v_.view(DType::f32, {numel_}), p_work, a);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() const {
  return {{"m", m_.view(DType::f32, {numel_})}, {"v", v_.view(DType::f32, {numel_})}};
}

}  // namespace trainer
