#include "profile/profiler.h"

#include <algorithm>
#include <map>

#include "core/errors.h"
#include "dist/communicator.h"

#ifdef TRAINER_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace trainer {

namespace {

void nvtx_push(const std::string& name) {
#ifdef TRAINER_HAVE_CUDA
  nvtxRangePushA(name.c_str());
#else
  (void)name;
#endif
}

void nvtx_pop() {
#ifdef TRAINER_HAVE_CUDA
  nvtxRangePop();
#endif
}

/// Length of the intersection of [a0, a1) with the union of the intervals `iv` (sorted by start, may overlap).
double covered(double a0, double a1, const std::vector<std::pair<double, double>>& iv) {
  double total = 0, reach = a0;
  for (auto [b0, b1] : iv) {
    const double lo = std::max(b0, reach), hi = std::min(b1, a1);
    if (hi > lo) {
      total += hi - lo;
      reach = hi;
    }
  }
  return total;
}

}  // namespace

Profiler::Profiler(Backend& be, bool nvtx, bool trace) : be_(be), nvtx_(nvtx), trace_(trace) {
  if (nvtx_ || trace_) be_.set_range_sink(this);
}

Profiler::~Profiler() {
  if (be_.range_sink() == this) be_.set_range_sink(nullptr);
}

Event& Profiler::event(size_t i) {
  while (events_.size() <= i) events_.push_back(be_.make_event());
  return *events_[i];
}

void Profiler::push(const char* name, const char* cat, int index) {
  if (!nvtx_ && !in_step_) return;  // a trace-only profiler outside a traced step (warm-up): no work per op
  std::string label = index >= 0 ? fmt::format("{} {}", name, index) : std::string(name);
  if (nvtx_) nvtx_push(label);
  if (!in_step_) return;
  const size_t e = used_++;
  be_.record(event(e));
  stack_.push_back({std::move(label), cat, e});
}

void Profiler::pop() {
  if (nvtx_) nvtx_pop();
  if (!in_step_ || stack_.empty()) return;
  const size_t e = used_++;
  be_.record(event(e));
  closed_.emplace_back(std::move(stack_.back()), e);
  stack_.pop_back();
}

void Profiler::begin_step(int step) {
  if (!trace_) return;
  if (!first_origin_) {
    first_origin_ = be_.make_event();
    origin_ = be_.make_event();
    be_.record(*first_origin_);
  }
  be_.record(*origin_);
  host_origin_ = std::chrono::steady_clock::now();
  in_step_ = true;
  step_ = step;
  used_ = 0;
  closed_.clear();
}

void Profiler::end_step(const Communicator* comm) {
  if (!trace_ || !in_step_) return;
  TRAINER_CHECK(stack_.empty(), "Profiler::end_step: range '{}' is still open", stack_.back().name);
  in_step_ = false;
  be_.synchronize();
  origin_offset_ms_ = be_.elapsed_ms(*first_origin_, *origin_);
  for (auto& [open, end] : closed_) {
    const double t0 = be_.elapsed_ms(*origin_, *events_[open.begin_event]);
    const double t1 = be_.elapsed_ms(*origin_, *events_[end]);
    spans_.push_back({std::move(open.name), open.cat, 0, step_, origin_offset_ms_ + t0, origin_offset_ms_ + t1});
  }
  closed_.clear();
  if (comm) {
    // Collectives that overlap in time (several MPI requests in flight) go on separate comm lanes (tid 1, 2, ...),
    // so that every track nests; NCCL's run one after another on its stream and share lane 1.
    std::vector<CommSpan> cs = comm->spans(*origin_, host_origin_);
    std::sort(cs.begin(), cs.end(), [](const CommSpan& a, const CommSpan& b) { return a.start_ms < b.start_ms; });
    std::vector<double> lane_end;
    for (const CommSpan& c : cs) {
      size_t lane = 0;
      while (lane < lane_end.size() && lane_end[lane] > c.start_ms) ++lane;
      if (lane == lane_end.size()) lane_end.push_back(0);
      lane_end[lane] = c.end_ms;
      lanes_ = std::max(lanes_, int(lane) + 1);
      spans_.push_back({c.what, "comm", 1 + int(lane), step_, origin_offset_ms_ + c.start_ms,
                        origin_offset_ms_ + c.end_ms});
    }
  }
  ++steps_traced_;
}

nlohmann::json Profiler::trace_events(int rank) const {
  using nlohmann::json;
  json ev = json::array();
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
  ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0}, {"args", {{"name", "compute stream"}}}});
  for (int l = 0; l < std::max(lanes_, 1); ++l)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 1 + l},
                  {"args", {{"name", l == 0 ? std::string("communication") : fmt::format("communication {}", l + 1)}}}});
  for (const Span& s : spans_)
    ev.push_back({{"name", s.name}, {"cat", s.cat}, {"ph", "X"}, {"pid", rank}, {"tid", s.tid},
                  {"ts", s.start_ms * 1e3}, {"dur", std::max(0.0, s.end_ms - s.start_ms) * 1e3},
                  {"args", {{"step", s.step}}}});
  return ev;
}

nlohmann::json Profiler::summary() const {
  using nlohmann::json;
  if (steps_traced_ == 0) return json::object();
  struct Total {
    double ms = 0;
    int64_t calls = 0;
  };
  std::map<std::pair<std::string, std::string>, Total> totals;
  std::vector<std::pair<double, double>> backward;
  double comm_ms = 0, comm_in_bwd = 0, bwd_ms = 0;
  for (const Span& s : spans_) {
    // Numbered ranges ("block 3", "backward 1": layer, microbatch) are totalled under the bare name.
    std::string key = s.name;
    const size_t sp = key.rfind(' ');
    if (sp != std::string::npos && sp + 1 < key.size() &&
        key.find_first_not_of("0123456789", sp + 1) == std::string::npos)
      key.resize(sp);
    Total& t = totals[{s.cat, key}];
    t.ms += s.end_ms - s.start_ms;
    ++t.calls;
    if (s.cat == "phase" && key == "backward") {
      backward.emplace_back(s.start_ms, s.end_ms);
      bwd_ms += s.end_ms - s.start_ms;
    }
  }
  std::sort(backward.begin(), backward.end());
  // Communication time is the union of the collectives' intervals (several may be in flight at once), and the part
  // of that union inside the backward phase.
  std::vector<std::pair<double, double>> comm;
  for (const Span& s : spans_)
    if (s.tid >= 1) comm.emplace_back(s.start_ms, s.end_ms);
  std::sort(comm.begin(), comm.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& iv : comm)
    if (!merged.empty() && iv.first <= merged.back().second) merged.back().second = std::max(merged.back().second, iv.second);
    else merged.push_back(iv);
  for (const auto& [a, b] : merged) {
    comm_ms += b - a;
    comm_in_bwd += covered(a, b, backward);
  }
  std::vector<std::pair<std::pair<std::string, std::string>, Total>> rows(totals.begin(), totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  json ranges = json::array();
  const double n = steps_traced_;
  for (const auto& [k, t] : rows)
    ranges.push_back({{"cat", k.first}, {"name", k.second}, {"calls_per_step", double(t.calls) / n},
                      {"ms_per_step", t.ms / n}});
  return {{"steps", steps_traced_},
          {"backward_ms_per_step", bwd_ms / n},
          {"comm_ms_per_step", comm_ms / n},
          {"comm_during_backward_ms_per_step", comm_in_bwd / n},
          {"note", "ms per traced step on the compute stream's timeline (GPU events; host clock on the CPU backend) "
                   "from events around each range (ranges nest: phase > block > op; naive attention's parts nest in "
                   "its range on CUDA); "
                   "phase 'backward' is the model's backward only, 'finish_backward' the strategy's wait for its "
                   "gradients; comm: the union of the collectives' intervals (communicator's own events: NCCL "
                   "stream events, MPI host clock), per collective in ranges (summed over collectives, so "
                   "overlapping ones count twice); comm_during_backward: the part of that union inside the backward "
                   "phase. With comm mpi a collective's interval ends when its completion is observed (the next "
                   "issue or wait on the communicator, at the latest finish_backward), so these overstate how long "
                   "it was in flight and how much of it overlapped the backward; NCCL's stream events do not"},
          {"ranges", ranges}};
}

}  // namespace trainer
