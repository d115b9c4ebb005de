// Jobs: what one `trainer` run does. Each job returns the job-specific part of the result record; main() adds the
// common fields (schema, status, config, machine, git) and writes it atomically on rank 0.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "config/config.h"
#include "core/errors.h"
#include "dist/run_context.h"

namespace trainer {

class Communicator;
class MemoryTimeline;
struct Plan;

/// A run that failed part-way (a non-finite loss) together with what it measured until then, for the record
/// (train: loss, grad_norm and lr per step, up to and including the failing step; non-finite values become null).
struct PartialRunError : RuntimeError {
  PartialRunError(const std::string& what, nlohmann::json partial_record)
      : RuntimeError(what), partial(std::move(partial_record)) {}
  nlohmann::json partial;
};

struct GemmTuning;
struct BackendOptions;

/// The backend options a run config asks for (fp32_matmul, gemm_autotune, deterministic; resolved config), for every
/// backend a job or the planner makes. memory_timeline is left null.
BackendOptions backend_options(const RunConfig& cfg);

/// The record's gemm_autotune section: whether cuBLASLt autotuning ran (and why not), and the totals of `t` when
/// given (shapes tuned, shapes that left the heuristic's first choice, one call of each shape with that first choice
/// and with the kept algorithm, ms); null t: totals not collected (attention_bench: one backend per point).
nlohmann::json gemm_autotune_record(const RunConfig& cfg, const GemmTuning* t);

/// job = "train": builds the model and strategy, runs bench.warmup_steps + bench.measure_steps steps of
/// bench.phase, and returns {model, steps, timing, throughput, memory, loss, grad_norm, lr, machine.backend}.
/// Raises OutOfMemory, RuntimeError.
nlohmann::json run_train(const RunConfig& cfg, const RunContext& ctx);

/// Rank 0 of a train run that ends without output (bad input found after its checkpointer took output.checkpoint's
/// lock; any thread): if this process holds that lock and made the directory for it, and the directory holds nothing
/// but .lock, removes .lock while the lock is still held, then the directories it made while empty; then drops the
/// lock. A process that holds no lock (another run has it: this one was refused) removes nothing. Idempotent.
void remove_new_checkpoint_dir();

/// Before the job (main, rank 0 of a train run with output.checkpoint): ConfigError, as the checkpointer's own lock
/// would give later, when another run holds DIR/.lock now, so that the refusal is one line before the run's start-up
/// log. Takes no lock and creates nothing; the checkpointer's lock still decides a race between two starts.
void check_checkpoint_dir_not_in_use(const std::string& dir);

/// job = "collective_bench": times collective.ops over collective.sizes_mb through parallel.comm on every rank, prints
/// an nccl-tests style table on rank 0 and returns {collective_bench: {comm, nranks, results[...]}, backend}.
/// Raises RuntimeError when the closed-form check finds a wrong element; ConfigError for an unavailable comm.
nlohmann::json run_collective_bench(const RunConfig& cfg, const RunContext& ctx);

/// collective_bench's f32 element count for collective `op` at `size_mb` MiB on `ranks` ranks: the whole array, for
/// reduce_scatter and all_gather rounded down to a multiple of `ranks` (a whole chunk a rank).
int64_t collective_elements(const std::string& op, double size_mb, int ranks);

/// job = "attention_bench": naive vs flash2 attention over the CS336 a2 grids (jobs/attention_bench.h).
nlohmann::json run_attention_bench(const RunConfig& cfg, const RunContext& ctx);

}  // namespace trainer
