// Jobs: what one `trainer` run does. Each job returns the job-specific part of the result record; main() adds the
// common fields (schema, status, config, machine, git) and writes it atomically on rank 0.
#pragma once
#include <nlohmann/json.hpp>

#include "config/config.h"

namespace trainer {

class Communicator;

struct RunContext {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;       // rank among the processes of this host (picks the GPU)
  int local_size = 1;
};

/// job = "train": builds the model and strategy, runs bench.warmup_steps + bench.measure_steps steps of
/// bench.phase, and returns {model, steps, timing, throughput, memory, loss, grad_norm, lr, machine.backend}.
/// Raises OutOfMemory, RuntimeError.
nlohmann::json run_train(const RunConfig& cfg, const RunContext& ctx);

}  // namespace trainer
