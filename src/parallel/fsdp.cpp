// Strategy "fsdp": fully sharded data parallelism (ZeRO stage 3: Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", SC 2020, Sec. 5.3; PyTorch FSDP: Zhao et al., "PyTorch FSDP: Experiences on
// Scaling Fully Sharded Data Parallel", VLDB 2023, Sec. 3-4; CS336 assignment 2, "fsdp").
//
// Shards. Every unit of the flat layout (model.h: the embedding, each block, the head) is padded to a multiple of N *
// ParamLayout::kAlign elements and cut into N equal shards; rank r keeps shard r of every unit, concatenated in unit
// order into one flat shard buffer [S] (S = sum of the units' padded sizes / N): the fp32 master weights
// (Category::parameters), the fp32 gradient accumulator (Category::gradients; with optimizer.in_backward only where a
// step has several microbatches, below; none in a run whose microbatches have no backward), AdamW's m and v (one AdamW
// over the whole [S]) and, in mixed precision, the bf16 working copy that AdamW writes in its own pass. The padding is
// zero in the weights and in every gradient that reaches it, so AdamW leaves it zero (m = v = 0, weight decay of 0 is
// 0). The RMSNorm gains are sharded like everything else (one collective per unit either way).
//
// Weights (the model's ParamResidency: model/residency.h). begin_schedule() gives the microbatch's uses in order;
// consecutive uses of one unit that read weights share one "gather" (recompute of block l followed by its backward),
// uses that read no weights (the embedding's backward) have none. Gather j all-gathers the unit's shards in the compute
// dtype (bf16 working copy in mixed precision, the fp32 master in fp32 runs) into a buffer of its unit's size class
// (fsdp_buffers.h: block-sized and vocabulary-sized buffers, Category::communication, held for the run; each class's
// gathers rotate through its buffers; sized for the run's schedule: the training one, or the forward-only one in a
// run without a backward), asynchronously. With D = prefetch_layers + 1 (at most the schedule's gathers: a training
// one has 2 x layers + 2 unless a recomputed segment spans several blocks; more would stay unused), gathers 0 .. D - 1
// are issued at begin_schedule; gather j + D is issued when gather j's last use is released (before that use's
// reduce_scatter, which nothing reads before the backward ends: on the one collective stream the gather would otherwise
// wait for it), so `prefetch_layers` gathers are in flight or ready ahead of the one in use, and a buffer is written
// again only after every reader of its previous contents was enqueued on the compute stream (each class has as many
// buffers as it has gathers in any D consecutive ones; fsdp_gather_slots checks it). The communicator orders its stream
// after the compute stream at issue time (NCCL: an event recorded on the compute stream, waited for on the comm stream;
// nccl_communicator.cpp), so the overwrite runs after those readers, and after the optimizer step that updated the
// shards: events, no host sync. acquire() waits for its gather: with NCCL the compute stream waits for the gather's end
// event (the host goes on); with MPI the host blocks in wait() (MPI progresses and completes on the host; CPU runs and
// ranks sharing a GPU).
//
// Gradients. A backward (or the head's forward_backward) use gets a staging buffer f32 [padded unit] of its size class
// (two rotating in a class whose backward uses follow each other, the blocks', else one; made at their first use;
// Category::gradients: they hold the backward's full-size unit gradient, the role of DDP's flat gradient buffer) with
// accumulate = false; the elements no parameter covers (alignment gaps, padding) are zeroed at acquire, since the
// buffer may hold another unit's gradient there. release() issues the asynchronous reduce_scatter (sum) of it: on the
// step's first microbatch straight into the unit's slice of the accumulator (in_backward with one microbatch: into the
// temporary below), on later microbatches into a shard-sized temporary (one per staging buffer) that is added to the
// accumulator once the reduce-scatter is done (when the staging buffer is next acquired, or in finish_backward). Memory
// stays sharded: nothing full-size outlives a use. finish_backward() waits for the outstanding reduce-scatters.
//
// With optimizer.in_backward (no clipping; the default then), on the step's last microbatch each gradient-writing use's
// slot also carries an update: once its reduce_scatter is done (drain) AdamW::step_range updates the unit's shards
// (master, m, v and the bf16 working copy) from the reduce_scatter's output, the slot's temporary where a step has one
// microbatch (then no fp32 accumulator exists: 4 bytes a shard element less) or the accumulator after the temporary's
// add; each unit's sum of g^2 goes to its slot of a small device buffer for the step's norm. Safe without events of its
// own: the update is enqueued on the compute stream after the reduce_scatter's wait; every earlier gather of the unit
// has read its shards before (waited for at acquire with NCCL; copied at issue with MPI); the unit's backward is its
// last use in the step (no later gather reads the shards it writes); the next step's gathers are ordered after it as
// after the optimizer step. The constructor refuses in_backward with clipping (max_grad_norm), which needs the norm of
// every unit's gradient before any update.
//
// Norm and step: grad_norm() is sqrt(sum over ranks of the shard's sum of squares) (the global norm over all shards,
// equal to one process's); optimizer_step() runs AdamW on the shards only (with in_backward: nothing but the norm, the
// sum over ranks of the updates' sums of g^2): there is no gather after it, the next forward's gathers read the updated
// shards. The full parameters exist only gathered: gathered_param() all-gathers a unit's master (or gradient) shards
// (collective) into one buffer, which gather_params() makes.
//
// Not done (issue 16): reduce_dtype bf16 (the communicators have no bf16 reduce-scatter yet; config refuses it);
// prefetch across microbatches (the next microbatch's first gathers are issued at its begin_schedule).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>
#include <vector>

#include "parallel/data_parallel.h"
#include "parallel/fsdp_buffers.h"

namespace trainer {

namespace {

int64_t round_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

class Fsdp final : public Strategy {
 public:
  Fsdp(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm, bool backward)
      : parallel_(parallel),
        optimizer_(optimizer),
        be_(be),
        comm_(checked(comm)),
        timer_(be, *comm),
        in_backward_(optimizer.in_backward.value_or(false)),
        backward_(backward) {
    CONFIG_CHECK(parallel.prefetch_layers >= 0, "parallel.prefetch_layers must be >= 0, got {}",
                 parallel.prefetch_layers);
    CONFIG_CHECK(!in_backward_ || !optimizer.max_grad_norm,
                 "optimizer: in_backward updates each unit before the global gradient norm is known, so it cannot clip "
                 "(optimizer.max_grad_norm {})", optimizer.max_grad_norm.value_or(0.0));
    CONFIG_CHECK(parallel.reduce_dtype == "fp32",
                 "parallel: reduce_dtype '{}' is not supported by fsdp (its gradients are reduce-scattered in fp32)",
                 parallel.reduce_dtype);
  }
  std::string name() const override { return "fsdp"; }
  bool full_params() const override { return false; }

  void setup(Model& model) override {
    model_ = &model;
    const ParamLayout& lay = model.layout();
    const int n = comm_.size(), r = comm_.rank();
    cdtype_ = model.act_dtype();
    units_.clear();
    int64_t off = 0, largest = 0;
    for (int u = 0; u < lay.num_units(); ++u) {
      Unit x;
      x.begin = lay.unit_begin(u);
      x.len = lay.unit_end(u) - x.begin;
      x.padded = round_up(std::max<int64_t>(x.len, 1), int64_t(n) * ParamLayout::kAlign);
      x.shard = x.padded / n;
      x.shard_off = off;
      off += x.shard;
      largest = std::max(largest, x.padded);
      units_.push_back(x);
    }
    // The elements of each padded unit that no parameter covers: alignment gaps and the tail padding.
    std::vector<int64_t> covered(units_.size(), 0);
    for (const ParamInfo& p : lay.params()) {
      Unit& x = units_[size_t(p.unit)];
      const int64_t at = p.offset - x.begin;
      if (at > covered[size_t(p.unit)]) x.gaps.push_back({covered[size_t(p.unit)], at - covered[size_t(p.unit)]});
      covered[size_t(p.unit)] = at + p.numel;
    }
    for (size_t u = 0; u < units_.size(); ++u)
      if (units_[u].padded > covered[u]) units_[u].gaps.push_back({covered[u], units_[u].padded - covered[u]});
    shard_total_ = off;
    largest_ = largest;
    check_same_layout(comm_, "fsdp shards", {lay.total(), n, shard_total_, largest_});

    master_ = be_.alloc(size_t(shard_total_) * 4, Category::parameters);
    be_.fill(master(), 0.f);
    grad_.reset();
    if (!in_backward_ && backward_) make_accumulator();  // in_backward: only for steps of several microbatches
    if (in_backward_) {  // each unit's sum of g^2 from its update, for the step's norm
      sumsq_ = make_sumsq_slots(be_, int64_t(units_.size()));
    }
    // This rank's piece of every parameter, from the model's weight source (the same on every rank: init_random's
    // seed or the loaded file), written at its place in the shard; the rest (padding) stays zero.
    for (const ParamInfo& p : lay.params()) {
      if (!model.has_weight_source()) break;  // the planner's dry run: no weights
      const Unit& x = units_[size_t(p.unit)];
      const int64_t lo = std::max(p.offset - x.begin, int64_t(r) * x.shard),
                    hi = std::min(p.offset - x.begin + p.numel, int64_t(r + 1) * x.shard);
      if (lo >= hi) continue;
      const std::vector<float> v = model.initial_values(p);
      be_.copy_from_host(static_cast<float*>(master_.data()) + x.shard_off + (lo - int64_t(r) * x.shard),
                         v.data() + (lo - (p.offset - x.begin)), size_t(hi - lo) * 4);
    }
    if (cdtype_ != DType::f32) {
      work_ = be_.alloc(size_t(shard_total_) * dtype_size(cdtype_), Category::parameters);
      be_.cast(work(), master());
    }
    adamw_ = std::make_unique<AdamW>(be_, shard_total_, optimizer_);

    // The gather and staging buffers in their size classes (fsdp_buffers.h), counted over the run's microbatch
    // schedule (a training one serves a forward-only microbatch too: its gathers begin the same): no more gathers
    // ahead than it has (training: 2 x layers + 2, more where a recomputed segment spans several blocks, its
    // recompute and each block's backward apart; forward-only: layers + 2, and no staging buffer).
    padded_.clear();
    for (const Unit& x : units_) padded_.push_back(x.padded);
    bufs_ = plan_fsdp_buffers(padded_, {model.unit_schedule(/*backward_next=*/backward_)}, parallel_.prefetch_layers,
                              dtype_size(cdtype_));
    std::string held;
    for (int c = 0; c < 2; ++c) {
      gather_bufs_[c].clear();
      for (int i = 0; i < bufs_.gathers[c]; ++i)
        gather_bufs_[c].push_back(be_.alloc(size_t(bufs_.elems(c)) * dtype_size(cdtype_), Category::communication));
      staging_[c].clear();
      staging_[c].resize(size_t(bufs_.staging[c]));  // made at the first backward use (forward-only: none)
      next_slot_[c] = 0;
      if (bufs_.gathers[c] + bufs_.staging[c] > 0)
        held += fmt::format("{}{} gather ({}){} buffer(s) of {} elements", held.empty() ? "" : "; ",
                            bufs_.gathers[c], dtype_name(cdtype_),
                            bufs_.staging[c] > 0 ? fmt::format(" and {} staging (f32, made at the first backward)",
                                                               bufs_.staging[c])
                                                 : "",
                            bufs_.elems(c));
    }
    spdlog::info("fsdp: each of {} ranks keeps {} of {} parameters' elements ({} units, padded; fp32 {}); {}; {} "
                 "gathers ahead; {} ({})",
                 n, shard_total_, lay.count(), units_.size(), format_bytes(size_t(shard_total_) * 4),
                 backward_ ? fmt::format("AdamW state {} per rank from its first update (one process: {})",
                                         format_bytes(adamw_->full_state_bytes()), format_bytes(size_t(lay.total()) * 8))
                           : std::string("no gradients or AdamW state (bench.phase forward)"),
                 bufs_.distance - 1, held, format_bytes(bufs_.bytes(dtype_size(cdtype_))));
  }

  void begin_microbatch(int m, int n_micro) override {
    Strategy::begin_microbatch(m, n_micro);
    if (m == 0) timer_.begin_step();
    // in_backward: the sum over microbatches, or a step without an update (begin_step(lr, false), or none called)
    if (backward_ && !grad_ && (n_micro > 1 || !update_now_)) make_accumulator();
    full_.reset();  // gathered_param's buffer lives only between steps
    full_unit_ = -1;
  }

  void begin_schedule(const std::vector<UnitUse>& uses) override {
    TRAINER_CHECK(model_ != nullptr, "fsdp: begin_schedule before setup");
    // checks the units and the buffers' fit (throws before anything changes)
    const std::vector<int> slots = fsdp_gather_slots(bufs_, padded_, uses);
    uses_ = uses;
    cursor_ = 0;
    gathers_.clear();
    use_gather_ = gather_of_uses(uses);
    for (size_t i = 0; i < uses.size(); ++i) {
      const UnitUse& u = uses[i];
      if (use_gather_[i] < 0) continue;
      if (size_t(use_gather_[i]) < gathers_.size())
        gathers_.back().last = i;
      else
        gathers_.push_back({u.unit, i, i, slots[gathers_.size()], nullptr, false, false});
    }
    const size_t ahead = std::min(gathers_.size(), size_t(bufs_.distance));
    for (size_t j = 0; j < ahead; ++j) issue_gather(j);
  }

  UnitView acquire(int unit, UnitPass pass) override {
    const size_t i = expect_use(unit, pass, "acquire");
    const Unit& x = units_[size_t(unit)];
    UnitView v;
    if (use_gather_[i] >= 0) {
      Gather& g = gathers_[size_t(use_gather_[i])];
      if (!g.issued) issue_gather(size_t(use_gather_[i]));
      if (!g.waited) {
        timer_.begin_exposed();
        g.work->wait();
        timer_.end_exposed();
        g.waited = true;
      }
      v.weights = gather_buf(size_t(use_gather_[i])).slice(0, {x.len});
    }
    if (writes_grads(pass)) {
      const int c = bufs_.klass(x.padded);
      Slot& s = staging_[c][next_slot_[c]];
      drain(s);  // its previous reduce-scatter has read it (and its temporary is added)
      if (!s.staging) s.staging = be_.alloc(size_t(bufs_.elems(c)) * 4, Category::gradients);
      const Tensor st = s.staging.view(DType::f32, {x.padded});
      // The backward writes only the parameters' elements: zero the rest, which may hold another unit's gradient.
      for (const auto& [at, n] : x.gaps) be_.fill(st.slice(at, {n}), 0.f);
      v.grads = st.slice(0, {x.len});
      v.accumulate = false;
    }
    return v;
  }

  void release(int unit, UnitPass pass) override {
    const size_t i = expect_use(unit, pass, "release");
    const Unit& x = units_[size_t(unit)];
    // The next gather goes first: on the one collective stream it would otherwise wait for this use's reduce_scatter
    // (fp32, twice a bf16 gather's bytes), which nothing needs before the backward's end.
    const int gj = use_gather_[i];
    if (gj >= 0 && gathers_[size_t(gj)].last == i) {  // the gather's buffer is free once this use's reads run
      const size_t next = size_t(gj) + size_t(bufs_.distance);
      if (next < gathers_.size()) issue_gather(next);
    }
    if (writes_grads(pass)) {
      const int c = bufs_.klass(x.padded);
      Slot& s = staging_[c][next_slot_[c]];
      next_slot_[c] = (next_slot_[c] + 1) % staging_[c].size();
      const Tensor in = s.staging.view(DType::f32, {x.padded});
      // in_backward, on the step's last microbatch: AdamW updates the unit's shards once the reduce_scatter is done
      // (drain); with one microbatch the gradient goes to the temporary only (there is no accumulator)
      const bool update = in_backward_ && update_now_ && micro_ + 1 == n_micro_;
      s.update_unit = update ? unit : -1;
      Tensor out = grad_ ? grads().slice(x.shard_off, {x.shard}) : Tensor();
      if (micro_ > 0 || !grad_) {  // into the temporary (added to the accumulator, if any, when done)
        if (!s.temp) s.temp = be_.alloc(size_t(bufs_.elems(c) / comm_.size()) * 4, Category::gradients);
        s.add_to = micro_ > 0 ? out : Tensor();
        out = s.temp.view(DType::f32, {x.shard});
      }
      timer_.touch();
      s.work = comm_.reduce_scatter(out, in, ReduceOp::sum, /*async=*/true);
    }
    ++cursor_;
  }

  void finish_backward() override {
    timer_.touch();
    full_unit_ = -1;
    for (auto& pool : staging_)
      for (Slot& s : pool) drain(s);
  }

  void begin_step(double lr, bool optimizer) override {
    if (optimizer) adamw_->begin_step(lr);  // AdamW's step values to the device, before the step's work
    update_now_ = optimizer;
  }

  double grad_norm() override {
    if (in_backward_ && update_now_) return std::sqrt(sum_over_ranks(slots_sum()));  // (no clipping: config)
    const double local = be_.sum_squares(grads());
    return std::sqrt(sum_over_ranks(local));
  }

  void optimizer_step(double lr, double grad_scale, bool want_norm) override {
    (void)lr;  // begin_step uploaded it
    if (in_backward_ && update_now_) {  // every unit was updated as its reduce_scatter landed (drain)
      TRAINER_CHECK(grad_scale == 1.0, "fsdp: optimizer.in_backward cannot scale (clip) the gradients");
      full_unit_ = -1;
      timer_.end_step();
      step_norm_ = want_norm ? std::sqrt(sum_over_ranks(slots_sum())) : std::nan("");
      return;
    }
    const double local =
        adamw_->update(master(), grads(), cdtype_ == DType::f32 ? Tensor() : work(), grad_scale, want_norm);
    const double norm = want_norm ? std::sqrt(sum_over_ranks(local)) : std::nan("");
    full_unit_ = -1;
    timer_.end_step();
    step_norm_ = norm;
  }

  /// The buffer gathered_param gathers into, made here: its allocation (near the peak: it is freed at every step)
  /// fails before any of the gathers every rank must join, not between two of them.
  void gather_params() override {
    if (!full_) full_ = be_.alloc(size_t(largest_) * 4, Category::communication);
    full_unit_ = -1;
  }

  Tensor gathered_param(const ParamInfo& p, bool grad) override {
    const Unit& x = units_[size_t(p.unit)];
    if (!full_) full_ = be_.alloc(size_t(largest_) * 4, Category::communication);
    const Tensor full = full_.view(DType::f32, {largest_}).slice(0, {x.padded});
    TRAINER_CHECK(!grad || grad_, "fsdp: {}'s gradient is not kept (optimizer.in_backward updates each unit from its "
                  "reduce_scatter's output; a run without a backward has none)", p.name);
    if (full_unit_ != p.unit || full_grad_ != grad) {  // one gather serves every parameter of the unit
      comm_.all_gather(full, (grad ? grads() : master()).slice(x.shard_off, {x.shard}))->wait();
      full_unit_ = p.unit;
      full_grad_ = grad;
    }
    return full.slice(p.offset - x.begin, {p.numel});
  }

  size_t optimizer_state_bytes() const override { return adamw_ ? adamw_->state_bytes() : 0; }
  /// Per unit: shard r of the padded unit, less the padding past the unit's end.
  OptimizerState optimizer_state() override {
    OptimizerState s{adamw_->state_tensors(), {}, false, adamw_.get()};
    const int64_t r = comm_.rank();
    for (const Unit& x : units_) {
      const int64_t n = std::min(x.shard, x.len - r * x.shard);
      if (n > 0) s.ranges.push_back({x.begin + r * x.shard, x.shard_off, n});
    }
    return s;
  }
  double comm_ms() const override { return timer_.comm_ms(); }
  double comm_exposed_ms() const override { return timer_.exposed_ms(); }

 private:
  struct Unit {
    int64_t begin = 0, len = 0;  // the unit's flat range [begin, begin + len) (model.h layout)
    int64_t padded = 0;          // len rounded up to N * kAlign
    int64_t shard = 0;           // padded / N: elements per rank
    int64_t shard_off = 0;       // where this rank's shard of the unit starts in the flat shard buffers
    std::vector<std::pair<int64_t, int64_t>> gaps;  // (start, count) in [0, padded) covered by no parameter
  };
  struct Gather {  // one all-gather serving uses [first, last] of the schedule
    int unit;
    size_t first, last;
    int slot;  // the buffer of its size class it gathers into (fsdp_gather_slots)
    std::unique_ptr<Work> work;
    bool issued, waited;
  };
  struct Slot {  // a gradient staging buffer and the reduce-scatter reading it
    Buffer staging;             // f32 [its class's elements]
    Buffer temp;                // f32 [its class's elements / N]: the reduce-scatter's output where it is not the
                                // accumulator (later microbatches; in_backward with one microbatch)
    std::unique_ptr<Work> work;  // the reduce-scatter in flight, or null
    Tensor add_to;              // accumulator slice temp is added to once work is done (empty: none)
    int update_unit = -1;       // in_backward: the unit AdamW updates once work is done, -1 none
  };

  static Communicator& checked(Communicator* comm) {
    CONFIG_CHECK(comm != nullptr, "parallel.strategy: 'fsdp' needs a communicator (parallel.comm)");
    return *comm;
  }
  Tensor master() const { return master_.view(DType::f32, {shard_total_}); }
  Tensor grads() const { return grad_.view(DType::f32, {shard_total_}); }
  Tensor work() const { return work_.view(cdtype_, {shard_total_}); }
  /// The shards the gathers read: the compute-dtype copy (bf16) or the fp32 master.
  Tensor compute_shards() const { return cdtype_ == DType::f32 ? master() : work(); }
  /// Gather j's buffer, [its unit's padded size].
  Tensor gather_buf(size_t j) const {
    const Gather& g = gathers_[j];
    const int64_t n = units_[size_t(g.unit)].padded;
    return gather_bufs_[bufs_.klass(n)][size_t(g.slot)].view(cdtype_, {n});
  }


  void issue_gather(size_t j) {
    Gather& g = gathers_[j];
    const Unit& x = units_[size_t(g.unit)];
    timer_.touch();
    g.work = comm_.all_gather(gather_buf(j), compute_shards().slice(x.shard_off, {x.shard}),
                              /*async=*/true);
    g.issued = true;
  }

  /// The use at the schedule's cursor, checked against what the model asks for.
  size_t expect_use(int unit, UnitPass pass, const char* what) const {
    TRAINER_CHECK(cursor_ < uses_.size(), "fsdp: {}({}, {}) after the schedule's {} uses (begin_schedule missing?)",
                  what, unit, unit_pass_name(pass), uses_.size());
    const UnitUse& u = uses_[cursor_];
    TRAINER_CHECK(u.unit == unit && u.pass == pass, "fsdp: {}({}, {}) but use {} of the schedule is ({}, {})", what,
                  unit, unit_pass_name(pass), cursor_, u.unit, unit_pass_name(u.pass));
    return cursor_;
  }

  /// Waits for the slot's reduce-scatter (NCCL: the compute stream waits) and adds its temporary if it has one.
  void drain(Slot& s) {
    if (!s.work) return;
    timer_.begin_exposed();
    s.work->wait();
    timer_.end_exposed();
    s.work.reset();
    Tensor g = s.add_to;  // where the unit's gradient (its sum over the step's microbatches) now is
    if (s.add_to.data) {
      be_.add_inplace(s.add_to, s.temp.view(DType::f32, {s.add_to.numel()}));
      s.add_to = Tensor();
    }
    if (s.update_unit >= 0) {
      const Unit& x = units_[size_t(s.update_unit)];
      if (!g.data) g = grad_ ? grads().slice(x.shard_off, {x.shard}) : s.temp.view(DType::f32, {x.shard});
      adamw_->step_range(x.shard_off, master().slice(x.shard_off, {x.shard}), g,
                         cdtype_ == DType::f32 ? Tensor() : work().slice(x.shard_off, {x.shard}),
                         static_cast<double*>(sumsq_.data()) + s.update_unit);
      s.update_unit = -1;
    }
  }

  /// The fp32 gradient accumulator over the shards (zeroed; held for the run once made).
  void make_accumulator() {
    grad_ = be_.alloc(size_t(shard_total_) * 4, Category::gradients);
    be_.fill(grads(), 0.f);
  }

  /// (syncs) This rank's sum of g^2 over the step's unit updates (in_backward), added in unit order.
  double slots_sum() { return sum_sumsq_slots(be_, sumsq_, units_.size()); }

  double sum_over_ranks(double local) {
    double total = local;
    comm_.all_reduce_host(&total, 1, HostOp::sum);  // host-side: in neither comm nor comm_exposed (CommTimer)
    return total;
  }

  const ParallelCfg parallel_;    // the config sections this strategy reads (copies)
  const OptimizerCfg optimizer_;
  Backend& be_;
  Communicator& comm_;
  CommTimer timer_;
  Model* model_ = nullptr;
  DType cdtype_ = DType::f32;
  std::vector<Unit> units_;
  int64_t shard_total_ = 0, largest_ = 0;  // elements of this rank's shards; of the largest padded unit
  Buffer master_, grad_, work_;            // f32, f32, compute dtype [shard_total] (work_ only in mixed precision;
                                           // grad_ with in_backward only for steps of several microbatches)
  const bool in_backward_;                 // optimizer.in_backward: AdamW per unit as its reduce_scatter lands
  const bool backward_;                    // the run's microbatches go backward (else: no gradient buffers at all)
  bool update_now_ = false;                // this step ends with an update (begin_step): without one, the accumulator
  Buffer sumsq_;                           // in_backward: f64 [units], each unit's sum of g^2 in its update
  std::unique_ptr<AdamW> adamw_;           // m, v [shard_total]
  std::vector<int64_t> padded_;            // [units] each unit's padded size
  FsdpBuffers bufs_;                       // the size classes and their buffer counts
  std::vector<Buffer> gather_bufs_[2];     // per class: compute dtype [bufs_.elems(class)], held for the run
  std::vector<Slot> staging_[2];           // per class: gradient staging slots, rotating
  size_t next_slot_[2] = {0, 0};
  Buffer full_;          // f32 [largest]: gathered_param's unit (freed when the next step starts)
  int full_unit_ = -1;    // the unit full_ holds, -1 none
  bool full_grad_ = false;  // ... its gradient rather than its weights
  // the current microbatch's schedule
  std::vector<UnitUse> uses_;
  std::vector<int> use_gather_;  // [use] index into gathers_, -1 for a use that reads no weights
  std::vector<Gather> gathers_;
  size_t cursor_ = 0;            // the next use the model makes
};

}  // namespace

std::unique_ptr<Strategy> make_fsdp_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be,
                                             Communicator* comm, bool backward) {
  return std::make_unique<Fsdp>(parallel, optimizer, be, comm, backward);
}

}  // namespace trainer
