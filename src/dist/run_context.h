// RunContext: where this process sits among the ranks of the run (from MpiSession), passed to every job.
#pragma once

#include <atomic>

namespace trainer {

class MemoryTimeline;
struct Plan;

struct RunContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this host (picks the GPU: local_rank % GPUs visible)
  int local_size = 1;  // processes on this host
  /// profile.memory_timeline: the log the job attaches to its backend from its construction on (BackendOptions);
  /// owned by main(), which writes it after the job, whether the job succeeded or ran out of memory. Else nullptr.
  MemoryTimeline* memory_timeline = nullptr;
  const Plan* plan = nullptr;  // job train: this rank's plan (plan/planner.h), made before the run; may be null
  /// profile.trace: set by job train once it has written the trace or said why none was (owned by main(), whose
  /// failure listener otherwise says, when a rank > 0 ends the run, that none was written). May be null.
  std::atomic<bool>* trace_told = nullptr;
};

}  // namespace trainer
