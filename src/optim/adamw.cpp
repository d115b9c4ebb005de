#include "optim/adamw.h"

namespace trainer {

AdamW::AdamW(Backend& be, int64_t numel, const OptimizerCfg& cfg, DType state_dtype, uint64_t seed)
    : be_(be), numel_(numel), cfg_(cfg), dtype_(state_dtype), seed_(seed) {
  TRAINER_CHECK(dtype_ == DType::f32 || dtype_ == DType::bf16, "AdamW: state dtype {} (f32 or bf16)",
                dtype_name(dtype_));
  step_values_ = be_.alloc(sizeof(AdamWStepValues), Category::optimizer);
}

void AdamW::allocate_state() {
  if (state_allocated_) return;
  state_allocated_ = true;
  m_ = be_.alloc(size_t(numel_) * dtype_size(dtype_), Category::optimizer);
  v_ = be_.alloc(size_t(numel_) * dtype_size(dtype_), Category::optimizer);
  if (numel_ > 0) {
    be_.fill(m_.view(dtype_, {numel_}), 0.f);
    be_.fill(v_.view(dtype_, {numel_}), 0.f);
  }
}

AdamWArgs AdamW::args(double grad_scale) const {
  AdamWArgs a;
  a.lr = lr_;
  a.beta1 = cfg_.betas.at(0);
  a.beta2 = cfg_.betas.at(1);
  a.eps = cfg_.eps;
  a.weight_decay = cfg_.weight_decay;
  a.t = t_;
  a.grad_scale = float(grad_scale);
  a.stochastic_rounding = cfg_.stochastic_rounding && dtype_ == DType::bf16;
  a.seed = seed_;
  a.step_values = static_cast<const AdamWStepValues*>(step_values_.data());
  return a;
}

void AdamW::begin_step(double lr) {
  allocate_state();
  ++t_;
  lr_ = lr;
  const AdamWStepValues v = adamw_step_values(args(1.0));
  be_.copy_from_host(step_values_.data(), &v, sizeof v);
}

double AdamW::update(Tensor p, const Tensor& g, Tensor p_work, double grad_scale, bool want_sumsq, double* sumsq_to,
                     const float* grad_scale_by) {
  TRAINER_CHECK(p.numel() == numel_ && g.numel() == numel_, "AdamW: {} parameters, state for {}", p.numel(), numel_);
  TRAINER_CHECK(t_ >= 1, "AdamW::update before begin_step");
  if (numel_ == 0) return 0.0;
  AdamWArgs a = args(grad_scale);
  a.grad_sumsq = want_sumsq;
  a.sumsq_to = want_sumsq ? sumsq_to : nullptr;
  a.grad_scale_by = grad_scale_by;
  return be_.adamw(p, g, m_.view(dtype_, {numel_}), v_.view(dtype_, {numel_}), p_work, a);
}

void AdamW::step_range(int64_t offset, Tensor p, const Tensor& g, Tensor p_work, double* sumsq_to) {
  const int64_t n = p.numel();
  TRAINER_CHECK(t_ >= 1, "AdamW::step_range before begin_step");
  TRAINER_CHECK(offset >= 0 && offset + n <= numel_ && g.numel() == n, "AdamW: range {}+{} (g {}) of {} parameters",
                offset, n, g.numel(), numel_);
  if (n == 0) return;
  AdamWArgs a = args(1.0);
  a.index_offset = offset;
  a.grad_sumsq = sumsq_to != nullptr;
  a.sumsq_to = sumsq_to;
  be_.adamw(p, g, m_.view(dtype_, {numel_}).slice(offset, {n}), v_.view(dtype_, {numel_}).slice(offset, {n}), p_work,
            a);
}

void AdamW::step_matrix(int64_t offset, Tensor p, Tensor p_work, const Tensor& dY, const Tensor& X, double* sumsq_to,
                        Tensor g_buf, bool accumulate) {
  const int64_t n = p.numel();
  TRAINER_CHECK(t_ >= 1, "AdamW::step_matrix before begin_step");
  TRAINER_CHECK(offset >= 0 && offset + n <= numel_ && n == dY.cols() * X.cols(),
                "AdamW: matrix {}+{} (dY {}, X {}) of {} parameters", offset, n, dY.shape_str(), X.shape_str(), numel_);
  AdamWArgs a = args(1.0);
  a.index_offset = offset;
  a.grad_sumsq = sumsq_to != nullptr;
  a.sumsq_to = sumsq_to;
  be_.matmul_dw_adamw(p, m_.view(dtype_, {numel_}).slice(offset, {n}), v_.view(dtype_, {numel_}).slice(offset, {n}),
                      p_work, dY, X, a, g_buf, accumulate);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state_tensors() {
  allocate_state();
  return {{"m", m_.view(dtype_, {numel_})}, {"v", v_.view(dtype_, {numel_})}};
}

}  // namespace trainer
