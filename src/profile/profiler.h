// Profiler: named ranges on the compute stream's timeline, for Nsight Systems (NVTX) and for Chrome traces.
//
// Code opens ranges with ScopedRange (backend/backend.h): phases (train.cpp: forward, backward, optimizer), blocks
// and attention (model.cpp), and every backend op. The Profiler is the backend's RangeSink while it lives:
//  - profile.nvtx: each range is an NVTX push/pop, so `nsys` shows phases, blocks and ops by name;
//  - profile.trace: inside begin_step() / end_step() each range also records a backend event at its start and end.
//    end_step() resolves them against the step's origin event into Chrome trace "X" events (GPU timeline, in us;
//    pid = rank, tid 0 = compute stream) and adds the collectives the communicator ran in the step (tid 1 = comm
//    stream: NCCL events on its own stream; MPI: host clock from issue to observed completion).
// summary() totals each (category, name) per traced step and says how much of the communication ran while the
// backward phase was running (the overlap a DDP variant achieves). On the CPU backend, events are host clock
// readings, so the same trace shows host time.
//
// Overhead: none without a sink; NVTX push/pop ~1 us; with a trace, two cudaEventRecord per range (~2-4 us of host
// time each) and a device sync at end_step(), so traced step times are upper bounds.
#pragma once
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace trainer {

class Communicator;

class Profiler final : public RangeSink {
 public:
  /// Attaches to `be` as its range sink when nvtx or trace is on (else it does nothing). Detaches in the destructor.
  Profiler(Backend& be, bool nvtx, bool trace);
  ~Profiler() override;
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  bool tracing() const { return trace_; }
  void push(const char* name, const char* cat, int index) override;
  void pop() override;

  /// Opens traced step `step`: records its origin event. Ranges outside a step are NVTX only.
  void begin_step(int step);
  /// Closes the step: synchronizes, resolves its ranges, and adds the collectives `comm` ran since its last
  /// reset_busy() (null: none). Raises RuntimeError if a range is still open.
  void end_step(const Communicator* comm);

  /// This rank's Chrome trace events (a JSON array; pid = rank, with process and thread name metadata).
  nlohmann::json trace_events(int rank) const;
  /// {steps, ranges: [{cat, name, calls_per_step, ms_per_step}] largest first, comm_ms_per_step,
  ///  comm_during_backward_ms_per_step, backward_ms_per_step}. Empty object when nothing was traced.
  nlohmann::json summary() const;

 private:
  struct Open {
    std::string name;
    const char* cat;
    size_t begin_event;
  };
  struct Span {
    std::string name;
    std::string cat;
    int tid;
    int step;
    double start_ms, end_ms;  // since the first traced step's origin
  };
  Event& event(size_t i);

  Backend& be_;
  bool nvtx_, trace_;
  bool in_step_ = false;
  int step_ = 0, steps_traced_ = 0;
  std::unique_ptr<Event> first_origin_, origin_;
  std::chrono::steady_clock::time_point host_origin_;
  double origin_offset_ms_ = 0;
  std::vector<std::unique_ptr<Event>> events_;  // pool, reused every step
  size_t used_ = 0;
  std::vector<Open> stack_;
  std::vector<std::pair<Open, size_t>> closed_;  // (range, end event) of the current step
  std::vector<Span> spans_;                      // every traced step
  int lanes_ = 0;                                // comm lanes used (tid 1..lanes_)
};

}  // namespace trainer
