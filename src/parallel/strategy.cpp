#include "parallel/strategy.h"

#include "optim/schedule.h"
#include "parallel/data_parallel.h"

namespace trainer {

std::unique_ptr<Strategy> make_none_strategy(const OptimizerCfg& optimizer, uint64_t seed, Backend& be);

void Strategy::attach(Model& model) {
  attached_ = &model;
  model.set_residency(this);
  setup(model);
}

UnitView Strategy::acquire(int unit, UnitPass pass) { return attached_->full_view(unit, pass); }

Buffer make_sumsq_slots(Backend& be, int64_t n) {
  Buffer b = be.alloc(size_t(n) * 8, Category::optimizer);
  be.fill(Tensor(b.data(), DType::f32, be.device(), {n * 2}), 0.f);  // (f64 zero: all-zero bits, as f32's)
  return b;
}

double sum_sumsq_slots(Backend& be, const Buffer& slots, size_t n) {
  std::vector<double> h(n);
  be.copy_to_host(h.data(), slots.data(), n * 8);
  double s = 0;
  for (double x : h) s += x;
  return s;
}

Tensor Strategy::gathered_param(const ParamInfo& p, bool grad) {
  return (grad ? attached_->grads() : attached_->params()).slice(p.offset, {p.numel});
}

std::vector<float> Strategy::download_param(const ParamInfo& p, bool grad) {
  return download_f32(attached_->backend(), gathered_param(p, grad));
}

void Strategy::release(int unit, UnitPass pass) {
  attached_->full_release(unit, pass);
  if (writes_grads(pass) && micro_ == n_micro_ - 1) on_unit_ready(unit);
}

void Strategy::clipped_optimizer_step(double lr, std::optional<double> max_grad_norm) {
  if (!max_grad_norm) {  // the norm (for the record) is read in AdamW's own pass over the gradients
    optimizer_step(lr, 1.0, /*want_norm=*/true);
    return;
  }
  const double norm = grad_norm();  // the clip factor is needed before the update: a separate pass (syncs)
  optimizer_step(lr, clip_factor(norm, max_grad_norm));
  step_norm_ = norm;
}

std::unique_ptr<Strategy> make_strategy(const RunConfig& cfg, Backend& be, Communicator* comm) {
  const std::string& s = cfg.parallel.strategy;
  if (s == "none") return make_none_strategy(cfg.optimizer, cfg.init.seed, be);
  if (s == "ddp_naive") return make_ddp_naive_strategy(cfg.parallel, cfg.optimizer, be, comm);
  if (s == "ddp_flat") return make_ddp_flat_strategy(cfg.parallel, cfg.optimizer, be, comm);
  if (s == "ddp_overlap") return make_ddp_overlap_strategy(cfg.parallel, cfg.optimizer, be, comm);
  if (s == "ddp_bucketed") return make_ddp_bucketed_strategy(cfg.parallel, cfg.optimizer, be, comm);
  if (s == "zero1") return make_zero1_strategy(cfg.parallel, cfg.optimizer, be, comm);
  if (s == "fsdp") return make_fsdp_strategy(cfg.parallel, cfg.optimizer, be, comm,
                                                  phase_has_backward(cfg.bench));
  throw ConfigError(fmt::format("parallel.strategy: '{}' is not available in this build", s));
}

}  // namespace trainer
