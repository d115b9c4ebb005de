// Strategy "none": one process owns everything; no communication.
//
// With optimizer.in_backward, AdamW updates each unit as soon as its gradient is final (the release of its backward
// use on the step's last microbatch), and gradients live per unit: allocated at the unit's first backward use of the
// step, freed after its update. The Model then keeps no flat gradient buffer (ParamStorage::full_grads false), so
// at most the gradients of the units whose backward has run but whose update has not exist at once (with one
// microbatch: one unit's). Without clipping only: the update cannot wait for the global norm.
// With optimizer.in_gemm as well, the weight matrices of the blocks and the LM head whose weight-gradient product has
// at least optimizer.in_gemm_min_elements elements (in_gemm_fused) are updated inside the products
// that compute their gradients on the step's last microbatch (WeightUpdate: the Model's weight_grad calls update(),
// AdamW::step_matrix, Backend::matmul_dw_adamw), adding the earlier microbatches' (and head chunks') sum where there
// are several; the release updates the runs of other parameters (the RMSNorm gains, the matrices below the bound) by
// step_range, one call per run, and any matrix the Model left to it (the head's bf16 gradient summed over chunks in
// fp32). With one microbatch a fused block matrix's gradient never exists: a block's gradient buffer holds only those
// runs (UnitView::grad_runs).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "optim/adamw.h"
#include "parallel/strategy.h"

namespace trainer {

namespace {
class NoneStrategy final : public Strategy, public WeightUpdate {
 public:
  NoneStrategy(const OptimizerCfg& optimizer, uint64_t seed, Backend& be)
      : optimizer_(optimizer),
        seed_(seed),
        be_(be),
        in_backward_(optimizer.in_backward.value_or(false)),
        in_gemm_(in_backward_ && optimizer.in_gemm.value_or(false)) {}
  std::string name() const override { return "none"; }
  bool full_grads() const override { return !in_backward_; }
  void setup(Model& model) override {
    model_ = &model;
    adamw_ = std::make_unique<AdamW>(be_, model.flat_size(), optimizer_, model.param_dtype(), seed_);
    const ParamLayout& lay = model.layout();
    // The sums of g^2 of the step's updates, read by step_grad_norm(): with in_backward one per unit, then (in_gemm)
    // one per parameter (a matrix's update, or a run of others starting there); else the sum and the clip factor.
    const int64_t slots = in_backward_ ? lay.num_units() + int64_t(lay.params().size()) : 2;
    sumsq_ = make_sumsq_slots(be_, slots);
    if (!in_backward_) return;
    unit_grads_.resize(size_t(lay.num_units()));
    gaps_.resize(size_t(lay.num_units()));
    for (int u = 0; u < lay.num_units(); ++u) {  // alignment padding inside the unit: zero gradients
      int64_t at = lay.unit_begin(u);
      for (const ParamInfo& p : lay.params()) {
        if (p.unit != u) continue;
        if (p.offset > at) gaps_[size_t(u)].push_back({at - lay.unit_begin(u), p.offset - at});
        at = p.offset + p.numel;
      }
      if (lay.unit_end(u) > at) gaps_[size_t(u)].push_back({at - lay.unit_begin(u), lay.unit_end(u) - at});
    }
    if (!in_gemm_) return;
    // in_gemm: which matrices are updated in their products (those of products of at least in_gemm_min_elements);
    // where none is, the step is in_backward's alone
    const std::vector<ParamInfo>& ps = lay.params();
    fuse_ = in_gemm_fused(lay, optimizer_.in_gemm_min_elements);
    for (size_t i = 0; i < ps.size(); ++i) param_index_[ps[i].offset] = int64_t(i);
    in_gemm_ = std::find(fuse_.begin(), fuse_.end(), 1) != fuse_.end();
    if (!in_gemm_) return;
    // a fused unit's runs of parameters between its matrices (the gains), each run at a 64-element boundary
    // (ParamLayout::kAlign) of the compact buffer a block uses at one microbatch; run_first_ keeps its first
    // parameter's index (its sum-of-squares slot); matrices_ each unit's fused matrices (their indices)
    runs_.resize(size_t(lay.num_units()));
    run_first_.resize(size_t(lay.num_units()));
    matrices_.resize(size_t(lay.num_units()));
    compact_.assign(size_t(lay.num_units()), 0);
    for (size_t i = 0; i < ps.size(); ++i)
      if (fuse_[i]) matrices_[size_t(ps[i].unit)].push_back(i);
    for (size_t i = 0; i < ps.size();) {
      const int u = ps[i].unit;
      if (!fused_unit(u) || fused(ps[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j + 1 < ps.size() && ps[j + 1].unit == u && !fused(ps[j + 1])) ++j;
      const int64_t b = ps[i].offset - lay.unit_begin(u), len = ps[j].offset + ps[j].numel - ps[i].offset;
      runs_[size_t(u)].push_back({b, len, compact_[size_t(u)]});
      run_first_[size_t(u)].push_back(i);
      compact_[size_t(u)] += (len + ParamLayout::kAlign - 1) / ParamLayout::kAlign * ParamLayout::kAlign;
      i = j + 1;
    }
  }
  void begin_step(double lr, bool optimizer) override {
    update_in_backward_ = in_backward_ && optimizer;
    gemm_updates_ = in_gemm_ && optimizer;
    if (in_gemm_) updated_.assign(model_->layout().params().size(), 0);
    if (optimizer) adamw_->begin_step(lr);  // uploads the step's lr and t (before any capture)
  }
  UnitView acquire(int unit, UnitPass pass) override {
    if (!in_backward_) return Strategy::acquire(unit, pass);
    UnitView v = model_->full_view(unit, pass);
    if (pass != UnitPass::backward && pass != UnitPass::forward_backward) return v;
    const ParamLayout& lay = model_->layout();
    const int64_t n = lay.unit_end(unit) - lay.unit_begin(unit);
    const DType t = model_->param_dtype();
    Buffer& g = unit_grads_[size_t(unit)];
    const bool fuse = gemm_updates_ && fused_unit(unit);  // its matrices are updated in their last products
    if (fuse && micro_ + 1 == n_micro_) v.weight_update = this;
    if (fuse && compact_now(unit)) {  // the matrices' gradients never exist: a compact buffer for the rest
      v.grad_runs = &runs_[size_t(unit)];
      const int64_t c = compact_[size_t(unit)];
      if (!g) {
        g = be_.alloc(size_t(c) * dtype_size(t), Category::gradients);
        be_.fill(g.view(t, {c}), 0.f);  // (padding inside a run stays zero)
        v.accumulate = false;
      }
      v.grads = g.view(t, {c});
      return v;
    }
    if (!g) {
      g = be_.alloc(size_t(n) * dtype_size(t), Category::gradients);
      for (const auto& [off, len] : gaps_[size_t(unit)]) be_.fill(g.view(t, {n}).slice(off, {len}), 0.f);
      v.accumulate = false;
    }
    v.grads = g.view(t, {n});
    return v;
  }
  void release(int unit, UnitPass pass) override {
    Strategy::release(unit, pass);
    if (!in_backward_ || (pass != UnitPass::backward && pass != UnitPass::forward_backward)) return;
    if (micro_ + 1 < n_micro_ || !update_in_backward_) return;  // the gradient accumulates over microbatches
    const ParamLayout& lay = model_->layout();
    const int64_t b = lay.unit_begin(unit), n = lay.unit_end(unit) - b;
    Buffer& g = unit_grads_[size_t(unit)];
    const Tensor all = work();
    double* slots = static_cast<double*>(sumsq_.data());
    if (!gemm_updates_ || !fused_unit(unit)) {
      adamw_->step_range(b, model_->params().slice(b, {n}), g.view(model_->param_dtype(), {n}),
                         all.data ? all.slice(b, {n}) : Tensor(), slots + unit);
    } else {  // the matrices were updated in their products: the runs of other parameters, from the compact buffer
              // (a block, one microbatch) or the whole unit's
      const DType t = model_->param_dtype();
      const bool compact = compact_now(unit);
      for (size_t i : matrices_[size_t(unit)]) {  // a matrix the Model did not hand to update(): from the buffer
        const ParamInfo& p = lay.params()[i];
        if (updated_[i]) continue;
        TRAINER_CHECK(!compact, "none: {} was not updated in its product, and its gradient has no slot", p.name);
        adamw_->step_range(p.offset, model_->params().slice(p.offset, {p.numel}),
                           g.view(t, {n}).slice(p.offset - b, {p.numel}),
                           all.data ? all.slice(p.offset, {p.numel}) : Tensor(), slots + lay.num_units() + int64_t(i));
      }
      const std::vector<GradRun>& runs = runs_[size_t(unit)];
      for (size_t r = 0; r < runs.size(); ++r) {
        const int64_t rb = b + runs[r].begin, rn = runs[r].length;
        const Tensor gr = compact ? g.view(t, {compact_[size_t(unit)]}).slice(runs[r].at, {rn})
                                  : g.view(t, {n}).slice(runs[r].begin, {rn});
        adamw_->step_range(rb, model_->params().slice(rb, {rn}), gr, all.data ? all.slice(rb, {rn}) : Tensor(),
                           slots + lay.num_units() + int64_t(run_first_[size_t(unit)][r]));
      }
    }
    g.reset();  // stream-ordered: the caching allocator hands it out again only to later work on this stream
  }
  void finish_backward() override {}
  // ---- WeightUpdate (optimizer.in_gemm) ----
  bool takes(const ParamInfo& p) const override { return gemm_updates_ && micro_ + 1 == n_micro_ && fused(p); }
  void update(const ParamInfo& p, const Tensor& dY, const Tensor& X, Tensor g_buf, bool accumulate) override {
    const auto slot = param_index_.find(p.offset);
    TRAINER_CHECK(slot != param_index_.end(), "none: no parameter at offset {} ({})", p.offset, p.name);
    // The product may span the parameters after p (q, k, v): each of them counts as updated, and the first one's
    // slot holds their sum of squares
    const int64_t n = dY.cols() * X.cols();
    const std::vector<ParamInfo>& ps = model_->layout().params();
    for (size_t i = size_t(slot->second); i < ps.size() && ps[i].offset < p.offset + n; ++i)
      updated_[i] = 1;  // (the layout lists parameters by offset)
    const Tensor all = work();
    adamw_->step_matrix(p.offset, model_->params().slice(p.offset, {n}), all.data ? all.slice(p.offset, {n}) : Tensor(),
                        dY, X, static_cast<double*>(sumsq_.data()) + model_->layout().num_units() + slot->second,
                        g_buf, accumulate);
  }
  double grad_norm() override {
    if (in_backward_) return std::sqrt(slots_sum());
    return std::sqrt(be_.sum_squares(model_->grads()));
  }
  // Enqueues only (no sync): the norm stays on the device until step_grad_norm(), so a step can be captured.
  void optimizer_step(double lr, double grad_scale, bool want_norm) override {
    (void)lr;  // begin_step uploaded it
    norm_asked_ = want_norm;
    if (in_backward_) return;  // every unit was updated during the backward, its sum of g^2 in its slot
    adamw_->update(model_->params(), model_->grads(), work(), grad_scale, want_norm,
                   static_cast<double*>(sumsq_.data()));
  }
  double step_grad_norm() override { return norm_asked_ ? std::sqrt(slots_sum()) : std::nan(""); }
  // Clipping on the device: the sum of g^2 into the norm's slot, the clip factor from it, AdamW reading the factor;
  // nothing waits for the host, so the step can be captured. The same values as the host path (clip_factor_to).
  void clipped_optimizer_step(double lr, std::optional<double> max_grad_norm) override {
    if (!max_grad_norm || in_backward_) {  // (in_backward with clipping is refused by the config)
      optimizer_step(lr, 1.0, /*want_norm=*/true);
      return;
    }
    double* sumsq = static_cast<double*>(sumsq_.data());
    float* factor = reinterpret_cast<float*>(sumsq + 1);  // sumsq_ has room for it (setup)
    be_.clip_factor_to(model_->grads(), *max_grad_norm, sumsq, factor);
    adamw_->update(model_->params(), model_->grads(), work(), 1.0, false, nullptr, factor);
    norm_asked_ = true;
  }
  size_t optimizer_state_bytes() const override { return adamw_ ? adamw_->state_bytes() : 0; }
  OptimizerState optimizer_state() override {
    return {adamw_->state_tensors(), {{0, 0, model_->layout().total()}}, false, adamw_.get()};
  }

 private:
  /// The units with a matrix in_gemm updates inside its product (setup: matrices_).
  bool fused_unit(int u) const { return in_gemm_ && !matrices_[size_t(u)].empty(); }
  /// The parameters it so updates: their weight matrices whose product is large enough (fuse_).
  bool fused(const ParamInfo& p) const {
    const auto i = param_index_.find(p.offset);
    return i != param_index_.end() && fuse_[size_t(i->second)];
  }
  /// Whether the unit's gradient buffer is compact (the runs only) in this step: a block (whose fused matrices the
  /// Model always hands to update(), one product each; the others have slots in the runs) on a step of one
  /// microbatch. The head's product comes in chunks.
  bool compact_now(int u) const { return n_micro_ == 1 && u + 1 < model_->layout().num_units(); }
  /// The bf16 working copy AdamW refreshes, or none (fp32 and bf16_pure: the weights are the working copy).
  Tensor work() const {
    return model_->params_work().data == model_->params().data ? Tensor() : model_->params_work();
  }
  double slots_sum() {  // (syncs) the updates' sums of g^2, added in unit order
    return sum_sumsq_slots(be_, sumsq_, in_backward_ ? sumsq_.bytes() / 8 : 1);
  }
  const OptimizerCfg optimizer_;  // the config section this strategy reads (a copy)
  const uint64_t seed_;           // init.seed (stochastic rounding)
  Backend& be_;
  // norm_asked_: the optimizer step left a norm in sumsq_ (set by the host code of the step, so also by its capture,
  // which every replay repeats)
  bool in_backward_ = false, update_in_backward_ = false, norm_asked_ = false;
  bool in_gemm_ = false, gemm_updates_ = false;  // optimizer.in_gemm; and this step has an update
  Model* model_ = nullptr;
  std::unique_ptr<AdamW> adamw_;
  std::vector<Buffer> unit_grads_;                              // in_backward: each unit's gradient, while it lives
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gaps_;  // in_backward: padding (offset, length) per unit
  std::vector<std::vector<GradRun>> runs_;     // in_gemm: per fused unit, the runs of its other parameters
  std::vector<std::vector<size_t>> run_first_;  // in_gemm: each run's first parameter (its sumsq slot)
  std::vector<std::vector<size_t>> matrices_;   // in_gemm: per unit, its fused matrices (parameter indices)
  std::vector<int64_t> compact_;                // in_gemm: per unit, the compact gradient's elements
  std::unordered_map<int64_t, int64_t> param_index_;  // in_gemm: a parameter's index (its slot) by its offset
  std::vector<char> updated_;  // in_gemm: per parameter (index), whether update() took it this step
  std::vector<char> fuse_;     // in_gemm: per parameter (index), whether its product updates it
  Buffer sumsq_;  // f64 sum g^2 of each update: [units + params] with in_backward, else [2] (the sum, the f32 clip
                  // factor)
};
}  // namespace

std::vector<char> in_gemm_fused(const ParamLayout& layout, int64_t min_elements) {
  const std::vector<ParamInfo>& ps = layout.params();
  std::vector<char> fuse(ps.size(), 0);
  for (size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].unit < 1 || ps[i].shape.size() != 2) continue;  // the embedding (unit 0), the gains
    fuse[i] = ps[i].product_numel > 0 ? ps[i].product_numel >= min_elements
                                      : fuse[i - 1];  // (k, v, w3: their product's first matrix's choice)
  }
  return fuse;
}

std::pair<int, int> in_gemm_fused_products(const ParamLayout& layout, int64_t min_elements) {
  const std::vector<ParamInfo>& ps = layout.params();
  const std::vector<char> fuse = in_gemm_fused(layout, min_elements);
  int fused = 0, all = 0;
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].unit >= 1 && ps[i].product_numel > 0) {
      ++all;
      fused += fuse[i];
    }
  return {fused, all};
}

std::unique_ptr<Strategy> make_none_strategy(const OptimizerCfg& optimizer, uint64_t seed, Backend& be) {
  return std::make_unique<NoneStrategy>(optimizer, seed, be);
}

}  // namespace trainer
