// RunContext: where this process sits among the ranks of the run (from MpiSession), passed to every job.
#pragma once

namespace trainer {

struct RunContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes of this host (picks the GPU: local_rank % GPUs visible)
  int local_size = 1;  // processes on this host
};

}  // namespace trainer
