#include "parallel/data_parallel.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "io/checksum.h"

namespace trainer {

void broadcast_weights(Model& model, Communicator& comm) {
  comm.broadcast(model.params(), /*root=*/0)->wait();
  model.sync_work_copy();
}

void check_same_layout(Communicator& comm, const std::string& what, const std::vector<int64_t>& layout) {
  // FNV-1a over the count and the integers' bytes, so [1, 2] and [1, 2, 0] differ
  std::vector<int64_t> words{int64_t(layout.size())};
  words.insert(words.end(), layout.begin(), layout.end());
  const uint64_t h = fnv1a64({reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t)});
  const int size = comm.size();
  std::vector<uint64_t> all(size_t(size), 0);
  comm.all_gather_host(&h, sizeof h, all.data());
  std::vector<int> differ;
  for (int r = 1; r < size; ++r)
    if (all[size_t(r)] != all[0]) differ.push_back(r);
  if (!differ.empty())
    throw RuntimeError(fmt::format("{}: the layout of rank(s) {} differs from rank 0's (different model, "
                                   "parallel.bucket_mb or world size on some ranks?); stopping before any gradient "
                                   "is exchanged",
                                   what, fmt::join(differ, ", ")));
}

// ---- CommTimer -------------------------------------------------------------------------------------------------

void CommTimer::begin_step() {
  comm_.reset_busy();
  used_ = 0;
  open_ = true;
}

void CommTimer::begin_exposed() {
  touch();
  if (used_ + 2 > events_.size()) {
    events_.push_back(be_.make_event());
    events_.push_back(be_.make_event());
  }
  be_.record(*events_[used_++]);
}

void CommTimer::end_exposed() {
  TRAINER_CHECK(used_ % 2 == 1, "CommTimer: end_exposed() without begin_exposed()");
  be_.record(*events_[used_++]);
}

double CommTimer::exposed_ms() const {
  double ms = 0;
  for (size_t i = 0; i + 1 < used_; i += 2) ms += be_.elapsed_ms(*events_[i], *events_[i + 1]);
  return std::min(ms, comm_ms());
}

// ---- DdpStrategy ------------------------------------------------------------------------------------------------

namespace {
Communicator& require(Communicator* comm, const std::string& name) {
  CONFIG_CHECK(comm != nullptr, "parallel.strategy: '{}' needs a communicator (parallel.comm)", name);
  return *comm;
}
}  // namespace

DdpStrategy::DdpStrategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm,
                         std::string name)
    : parallel_(parallel), optimizer_(optimizer), be_(be), comm_(require(comm, name)), timer_(be, *comm), name_(std::move(name)) {}

void DdpStrategy::setup(Model& model) {
  model_ = &model;
  broadcast_weights(model, comm_);
  adamw_ = std::make_unique<AdamW>(be_, model.flat_size(), optimizer_);
  if (parallel_.reduce_dtype == "bf16") wire_ = be_.alloc(size_t(model.flat_size()) * 2, Category::communication);
  setup_layout();
}

std::unique_ptr<Work> DdpStrategy::reduce(const std::vector<std::pair<int64_t, int64_t>>& ranges, bool async) {
  std::vector<Tensor> bufs, wire;
  for (const auto& [begin, end] : ranges) {
    bufs.push_back(grad_range(begin, end));
    if (wire_) wire.push_back(wire_.view(DType::bf16, {model_->flat_size()}).slice(begin, {end - begin}));
  }
  if (wire_) return comm_.all_reduce_many_via(bufs, wire, ReduceOp::sum, async);
  return comm_.all_reduce_many(bufs, ReduceOp::sum, async);
}

OptimizerState DdpStrategy::optimizer_state() {
  return {adamw_->state_tensors(), {{0, 0, model_->layout().total()}}, true, adamw_.get()};
}

void DdpStrategy::begin_step(double lr, bool optimizer) {
  if (optimizer) adamw_->begin_step(lr);  // AdamW's step values to the device, before the step's work
}

double DdpStrategy::grad_norm() { return std::sqrt(be_.sum_squares(model_->grads())); }

void DdpStrategy::optimizer_step(double lr, double grad_scale, bool want_norm) {
  // Every rank holds the whole reduced gradient, so the local norm is the global one.
  Tensor work = model_->act_dtype() == DType::f32 ? Tensor() : model_->params_work();
  (void)lr;  // begin_step uploaded it
  const double sumsq = adamw_->update(model_->params(), model_->grads(), work, grad_scale, want_norm);
  step_norm_ = want_norm ? std::sqrt(sumsq) : std::nan("");
}

}  // namespace trainer
