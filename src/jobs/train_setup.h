// The train job's set-up, shared by the run (jobs/train.cpp) and the planner's dry run (plan/planner.cpp), so the
// model, strategy and activation store the planner measures on the meta backend are the ones a run builds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "config/config.h"
#include "dist/communicator.h"
#include "jobs/train_step.h"
#include "model/model.h"
#include "parallel/strategy.h"

namespace trainer {

/// How long the host-side collectives wait while one rank's checkpoint I/O may hold the others (a checkpoint's write,
/// where rank 0 writes the weights alone; the weights' and a resume's reads): parallel.checkpoint_timeout_s, or
/// comm_timeout_s where that is longer (never shorter than the ordinary wait), naming the key that set it. Used
/// through ScopedHostTimeout (here and by jobs/train_checkpoint.h).
HostTimeout checkpoint_wait(const ParallelCfg& p);

struct TrainSetup {
  ModelDims dims;
  std::unique_ptr<Model> model;
  std::unique_ptr<Strategy> strategy;  // attached to model
  StepShape shape;                     // this rank's step (microbatches, rows, phase)
  int rows_per_rank = 0;
  int64_t rank_tokens = 0;             // tokens of this rank's share of the step
  double weights_read_s = 0;           // seconds spent reading init.weights / the resumed checkpoint's weights
  // init.resume, resolved once (its 'latest' read once): the step directory whose weights were loaded and its
  // manifest as read then, for TrainCheckpointer::resume (the optimizer state of the same step, whatever 'latest'
  // names by then). Empty / null without init.resume or in a dry run.
  std::string resume_dir;
  nlohmann::json resume_manifest;
};

/// Builds what a train run of `cfg` on `world_size` ranks holds on one rank before its first step, on `be`: the Model
/// (dims, activation dtype and attention from cfg; flat buffers a multiple of kAlign * world_size), its weights (when
/// init_weights: cfg.init.weights, init.resume's checkpoint weights or the seeded random init; the dry run skips them), the strategy (comm may be null
/// only for "none") attached to it, and the activation store reserved for one microbatch. Raises ConfigError,
/// OutOfMemory, RuntimeError.
TrainSetup setup_training(const RunConfig& cfg, Backend& be, Communicator* comm, int world_size, bool init_weights);

}  // namespace trainer
