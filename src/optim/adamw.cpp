#include "optim/adamw.h"

namespace trainer {

AdamW::AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg, DType state_dtype, uint64_t seed)
    : be_(be), numel_(numel), cfg_(cfg), dtype_(state_dtype), seed_(seed) {
  TRAINER_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16, "AdamW: state dtype {} (f32 or bf16)",
                dtype_name(dtype_));
  m_ = be_.alloc(size_t(numel) * dtype_size(dtype_), Category::optimizer);
  v_ = be_.alloc(size_t(numel) * dtype_size(dtype_), Category::optimizer);
  if (numel > 0) {
    be_.fill(m_.view(dtype_, {numel}), 0.f);
    be_.fill(v_.view(dtype_, {numel}), 0.f);
  }
}

AdamWArgs AdamW::args(double lr, double grad_scale) const {
  AdamWArgs a;
  a.lr = float(lr);
  a.beta1 = float(cfg_.betas.at(0));
  a.beta2 = float(cfg_.betas.at(1));
  a.eps = float(cfg_.eps);
  a.weight_decay = float(cfg_.weight_decay);
  a.t = t_;
  a.grad_scale = float(grad_scale);
  a.stochastic_rounding = cfg_.stochastic_rounding && dtype_ == DType::bf16;
  a.seed = seed_;
  return a;
}

double AdamW::step(Tensor p, const Tensor& g, Tensor p_work, double lr, double grad_scale, bool want_sumsq) {
  TRAINER_CHECK(p.numel() == numel_ && g.numel() == numel_, "AdamW: {} parameters, state for {}", p.numel(), numel_);
  ++t_;
  if (numel_ == 0) return 0.0;
  AdamWArgs a = args(lr, grad_scale);
  a.grad_sumsq = want_sumsq;
  return be_.adamw(p, g, m_.view(dtype_, {numel_}), v_.view(dtype_, {numel_}), p_work, a);
}

void AdamW::step_range(int64_t offset, Tensor p, const Tensor& g, Tensor p_work, double lr, double* sumsq_to) {
  const int64_t n = p.numel();
  TRAINER_CHECK(t_ >= 1, "AdamW::step_range before begin_step");
  TRAINER_CHECK(offset >= 0 && offset + n <= numel_ && g.numel() == n, "AdamW: range {}+{} (g {}) of {} parameters",
                offset, n, g.numel(), numel_);
  if (n == 0) return;
  AdamWArgs a = args(lr, 1.0);
  a.index_offset = offset;
  a.grad_sumsq = sumsq_to != nullptr;
  a.sumsq_to = sumsq_to;
  be_.adamw(p, g, m_.view(dtype_, {numel_}).slice(offset, {n}), v_.view(dtype_, {numel_}).slice(offset, {n}), p_work,
            a);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() const {
  return {{"m", m_.view(dtype_, {numel_})}, {"v", v_.view(dtype_, {numel_})}};
}

}  // namespace trainer
