// The planner: memory, FLOPs and a predicted step time of a train run, per rank, without running it.
//
// It is a dry run of the real code on the meta backend (backend/meta): the same set-up as the train job
// (jobs/train_setup.h: Model, Strategy, activation store), the first two steps through train_step() (one for a
// run of one step; a strategy's lazily made buffers count from the second) (jobs/train_step.h) and, where the run
// writes a checkpoint, its reads of the weights (Strategy::gathered_param), on a backend that allocates nothing and
// runs no op, with a MetaCommunicator as rank `rank` of `world_size`. What its MemoryStats saw is the prediction
// (peak, split by category at the peak, the phase and block of the peak), so the plan follows whatever the model,
// the checkpointing policy or the strategy allocates. A function of the resolved config, the world size and, with
// init.resume, the resumed checkpoint's manifest (its step and shapes): no GPU, no MPI traffic, nothing written.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <string>

#include "backend/meta/meta_backend.h"
#include "config/config.h"
#include "core/memory.h"

namespace trainer {

/// One tensor a block keeps for its backward (model/activations.h's table at the run's microbatch).
struct SavedTensorRow {
  std::string name, kind, dtype;  // kind: input | kept | elementwise (SavedKind)
  std::vector<int64_t> shape;
  size_t bytes = 0;
  bool stored = false;       // kept by a block that is not recomputed (elementwise ones only under policy none)
  bool checkpointed = false; // kept by a recomputed block from its forward to its backward: the input (where a
                             // segment starts), attention's outputs with keep_attention
};

struct Plan {
  int world_size = 1, rank = 0;
  std::string device;     // the target: "cuda" or "cpu" (cfg.device)
  std::string strategy;   // parallel.strategy
  std::string comm;       // the communicator the run would use (nccl | mpi)
  int64_t tokens_per_step = 0;       // global batch tokens
  int64_t rank_tokens_per_step = 0;  // this rank's share of them (what flops, bytes_moved and the times below are for)
  // memory (bytes, this rank)
  size_t peak_bytes = 0;
  std::array<size_t, kNumCategories> by_category{};     // split at the peak
  std::array<size_t, kNumCategories> category_peaks{};  // each category's own peak
  std::string peak_phase;   // setup | forward | backward | finish_backward | optimizer | checkpoint
  std::string peak_block;   // "block 3", "lm_head", or "" (outside any block)
  std::vector<SavedTensorRow> block_store;  // what one block keeps for its backward, per microbatch
  size_t setup_bytes = 0;   // in use after set-up, before the first step
  std::map<std::string, size_t> phase_high_water;  // highest total seen in each phase
  size_t device_memory_bytes = 0;  // of the target device (cuda: the gpu's, an H200's by default; cpu: 0, unbounded)
  // work of one step on this rank
  double flops = 0;           // model FLOPs incl. recompute (attention counted as forward_flops_per_token does)
  double executed_flops = 0;  // what the kernels execute (causal flash attention halves)
  double bytes_moved = 0;     // bytes read + written by the ops
  double compute_s = 0, memory_s = 0, comm_s = 0;  // predicted time of FLOP-bound ops, byte-bound ops, collectives
                                                   // (comm_s: their busy time, overlapped or not)
  double comm_exposed_s = 0;  // the part of the step the compute stream waits for collectives (or ends before the
                              // last one): comm_s minus what ran under the ops (dist/meta_communicator.h)
  double overlap_slowdown_s = 0;  // what the collectives running under the ops took from them
                                  // (MetaCommunicator::overlap_slowdown times comm_s - comm_exposed_s)
  double time_s = 0;          // compute_s + memory_s + comm_exposed_s + overlap_slowdown_s (ops in sequence; an op,
                              // fused or not, costs the slower of its FLOPs and its bytes; collectives on a stream of
                              // their own)
  double comm_bytes = 0;      // bytes this rank sends in collectives (busbw convention)
  int64_t collectives = 0;    // collectives of one step (a grouped NCCL launch counts once)
  double comm_latency = 0;    // seconds assumed per collective (MetaCommunicator::default_latency)
  double comm_overlap_slowdown = 0;  // MetaCommunicator::overlap_slowdown
  MetaRates rates;
  bool deterministic = false;  // cuda, config deterministic: the attention backward's dQ in key-tile order (Hopper;
                               // the mma.sync dQ pass for d 16 / 32 and fp32)
  double bus_bandwidth = 0;   // bytes/s assumed for collectives

  /// {"world_size", "rank", "device", "strategy", "comm", "tokens_per_step", "rank_tokens_per_step", "memory":
  /// {"peak_bytes", "by_category", "category_peaks", "peak_phase", "peak_block", "setup_bytes", "phase_high_water", "device_memory_bytes",
  /// "fits", "block_store": [{"name", "kind", "dtype", "shape", "bytes", "stored", "checkpointed"}]}, "flops",
  /// "executed_flops", "bytes_moved", "time_s", "time": {"compute_s", "memory_s", "comm_s", "comm_exposed_s",
  /// "overlap_slowdown_s"},
  /// "comm_bytes", "collectives", "assumptions": {...}}
  nlohmann::json to_json() const;
  /// The record's memory.predicted: {"peak_bytes", "by_category", "peak_phase", "peak_block"}.
  nlohmann::json predicted_json() const;
  /// A human-readable table (several lines, ending in a newline).
  std::string table() const;
  /// One line: predicted peak by category and step time.
  std::string summary_line() const;
};

/// The fraction of the device's memory a rank's planned peak may use (the rest: the CUDA context, cuBLAS and NCCL
/// buffers outside the trainer's pool, the caching allocator's rounding). The 8B step ran at 128.7 GiB planned and
/// measured on a 139.8 GiB H200; 0.93 of it is 130 GiB.
constexpr double kFitFraction = 0.93;

/// Seconds as "1.23 s", "12.34 ms", "7.81 us" (`decimals` after the point; a tiny model's step is microseconds,
/// not "0.00 ms"), or "0 ms".
std::string format_seconds(double s, int decimals = 2);

/// The plan of rank `rank` of a train run of `cfg` (resolved: load_config) on `world_size` ranks. The dry run logs
/// nothing. `gpu` (known_gpus: "h200", "h100") is the cuda target's memory and rates. Raises ConfigError for a config
/// the train job would refuse at set-up, or an unknown gpu (any device); RuntimeError.
Plan make_plan(const RunConfig& cfg, int world_size, int rank = 0, const std::string& gpu = "h200");

}  // namespace trainer
