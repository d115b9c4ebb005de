// Training checkpoints of the train job (issue 18): the whole state of a run, written to output.checkpoint and read
// back by init.resume, so that a resumed run continues bitwise where the first one stopped.
//
// A checkpoint after S steps (io/checkpoint.h has the directory layout and the crash-safe write):
//   model.safetensors       every parameter, fp32, reference names (Strategy::download_param: the fp32 master in
//                           fp32 and bf16 mixed precision; fsdp gathers the shards); a resume loads it as the
//                           weight source, so every strategy and world size takes its own shards from it.
//   optim-rankNNNNN.safetensors   one rank's OptimizerState tensors (m, v, ...), 1-D, in their stored dtype
//                           (bf16 state is saved as BF16); DDP's replicated state only from rank 0.
//   manifest.json           {format, step, world_size, strategy, precision, weights, layout_total,
//                            optimizer {steps_taken, tensors {name: dtype}, replicated, shards [{rank, file, numel,
//                            ranges [[flat_begin, local_begin, count], ...]}]},
//                            schedule {next_step, lr_next, total_steps, ...}, data {next_step, seed, ...},
//                            config (resolved), config_hash, written, trainer}
// The flat ranges are offsets of the model's flat layout (ParamLayout), which does not depend on the world size or
// the strategy: a resume reads, for each range of its own state, the pieces of the old shards that overlap it.
// The data sources are counter-based in (seed, step, row) (io/token_data.h) and the schedule is a function of the
// step, so the step is their whole position.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/model.h"
#include "parallel/strategy.h"

namespace trainer {

class Communicator;

class TrainCheckpointer {
 public:
  /// total_steps: the run's length (bench.warmup_steps + measure_steps), for the schedule's record. Collective: with
  /// output.checkpoint, rank 0 takes an advisory lock (flock) on DIR/.lock for the run (the directory is made if
  /// missing; the file stays, unless the run made the directory and ends with bad input: main() then removes both,
  /// remove_new_checkpoint_dir; the kernel drops the lock when the process ends, a crash included). ConfigError on
  /// every rank when another run holds it: two runs writing one directory would interleave their steps and latest.
  TrainCheckpointer(const RunConfig& cfg, Backend& be, Model& model, Strategy& strategy, Communicator& comm,
                    int64_t total_steps);
  ~TrainCheckpointer();
  TrainCheckpointer(const TrainCheckpointer&) = delete;
  TrainCheckpointer& operator=(const TrainCheckpointer&) = delete;

  /// Whether output.checkpoint_every asks for a checkpoint after `steps_done` steps (never twice for one step).
  bool due(int64_t steps_done) const;
  /// Whether the checkpoint of `steps_done` steps has been written (write() is then a no-op).
  bool written(int64_t steps_done) const { return last_written_ == steps_done; }
  /// Collective (every rank, same order): writes the training state after `steps_done` steps to output.checkpoint
  /// (no-op without one, or when that step is already written). The train job calls it every checkpoint_every steps
  /// and once after its last step; a run that leaves its step loop early (an interrupt) calls it the same way with
  /// the steps it completed. RuntimeError on every rank when any rank's part failed (the previous checkpoint stays).
  void write(int64_t steps_done);

  /// Collective: with init.resume, restores this rank's optimizer state and AdamW step count from the checkpoint
  /// step directory `step_dir` with its `manifest`, both as setup_training resolved and read them when it loaded the
  /// weights (TrainSetup::resume_dir / resume_manifest; weights_read_s: how long that took), and returns the step to
  /// continue at; 0 without init.resume. ConfigError ("init.resume: ...") when the shards do not cover this rank's
  /// state or their dtypes differ from this run's.
  int64_t resume(const std::string& step_dir, const nlohmann::json& manifest, double weights_read_s);

  /// The record's `checkpoint` section: {dir, every, writes [{step, path, write_s, bytes}], resumed_from {path,
  /// step, read_s}} (null parts when unused).
  nlohmann::json record() const;
  /// Seconds spent in write() in all (null when nothing was written) and in resume() plus the weights' read.
  nlohmann::json write_seconds() const;
  nlohmann::json read_seconds() const;

 private:
  /// Raises RuntimeError on every rank if `err` is non-empty on any rank (collective, first_failure): a failed rank
  /// its own error, the others the first failed rank's; OutOfMemory instead where some rank's failure was out of
  /// memory (`oom`), so the run ends as such on every rank (status oom, exit code 3), with the first such rank's
  /// message (a rank that failed otherwise logs its own).
  void agree(const std::string& err, const char* what, bool oom = false);

  const RunConfig& cfg_;
  Backend& be_;
  Model& model_;
  Strategy& strategy_;
  Communicator& comm_;
  int64_t total_steps_;
  int exceptions_at_start_;  // std::uncaught_exceptions() at construction: the destructor tells an exception's end
  int64_t last_written_ = -1;
  std::string parent_;  // the step directory in output.checkpoint this run continues from (resumed from, or its last
                        // write)
  nlohmann::json writes_ = nlohmann::json::array();
  nlohmann::json resumed_ = nullptr;
};

}  // namespace trainer
