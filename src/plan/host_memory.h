// Host memory: a lower bound of what a run (or a --plan dry run) of a config needs in host RAM, checked against
// /proc/meminfo's MemAvailable before anything is allocated, so an impossible size (model.num_layers=30000000) is one
// line and exit code 2 in well under a second instead of a process that grows until the kernel kills it.
//
// What grows on the host, found by measuring `trainer --plan` RSS against num_layers (20 MB at 2000 layers, 48 MB at
// 20000: ~1.5 KiB per block):
//   - bookkeeping per block: the parameter layout (9 named tensors with their shapes), the unit schedule and the
//     activation store's and the strategy's per-unit entries; counted here as kBookkeepingBytesPerBlock = 1 KiB, below
//     what was measured, so the bound stays a lower bound;
//   - on the cpu backend the tensors themselves: weights, gradients and AdamW m and v, 16 bytes per parameter in
//     fp32, 8 in bf16_pure, less the gradients (a quarter) with optimizer.in_backward (no flat gradient buffer);
//     gradients and weights divided by the world size under fsdp, the optimizer state under zero1 and fsdp; times
//     the ranks that share this host;
//   - one step's token ids per rank (batch_size / world_size x context_length tokens): the train job's inputs and
//     targets (int32 each, 8 bytes a token), on the cpu also the model's copy of them and its per-token losses (12
//     more); the --plan dry run's one zero-filled token array (4 bytes a token). data.batch_size=2000000000 had
//     made the dry run throw std::bad_alloc.
//   - the weights file (init.weights, or init.resume's model.safetensors): every rank reads the whole file into host
//     memory while it loads (the file's size, times the ranks that share this host; not for the --plan dry run, which
//     reads no weights).
// Activations and workspaces are not counted (a lower bound: a run this check passes may still run out of memory).
#pragma once
#include <cstddef>
#include <string>

#include "config/config.h"

namespace trainer {

inline constexpr size_t kBookkeepingBytesPerBlock = 1024;

inline constexpr double kRunTokenBytes = 8;     // a token's input and target ids (int32) on the host, a run
inline constexpr double kCpuTokenBytes = 12;    // the cpu backend's copy of them and the token's fp32 loss
inline constexpr double kDryRunTokenBytes = 4;  // the plan's dry run: one int32 id a token

struct HostNeed {
  size_t bookkeeping = 0;  // bytes: per-block structures of the model, schedule and strategy (this process)
  size_t tensors = 0;      // bytes: cpu backend parameters, gradients, AdamW state (all ranks on this host)
  size_t tokens = 0;       // bytes: one step's token ids (and on the cpu losses) of a rank (all ranks on this host)
  size_t weights_file = 0;  // bytes: the weights file as read while loading (all ranks on this host)
  size_t total() const { return bookkeeping + tensors + tokens + weights_file; }
};

/// The weights file a train run reads whole on every rank: init.weights, or init.resume's STEP/model.safetensors
/// (the step load_config resolved); "" when none (random init, another job, an unresolved resume).
std::string weights_file_path(const RunConfig& cfg);

/// The lower bound above for `cfg` (resolved) on `world_size` ranks, `local_ranks` of them on this host. dry_run: for
/// --plan (the meta backend holds no tensors: bookkeeping and the dry run's token ids only).
HostNeed host_memory_needed(const RunConfig& cfg, int world_size, int local_ranks, bool dry_run);

/// MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read (then nothing is checked).
size_t host_memory_available();

/// Raises ConfigError (one line naming the key that makes it large, the bytes needed and MemAvailable) when
/// host_memory_needed(...) exceeds host_memory_available(). `available` 0: read /proc/meminfo.
void check_host_memory(const RunConfig& cfg, int world_size, int local_ranks, bool dry_run, size_t available = 0);

/// On the cpu backend the plan's peak (planner.h: activations and workspaces included, which check_host_memory leaves
/// out) is host memory: ConfigError (one line) when peak_bytes x local_ranks exceeds MemAvailable, so a run that
/// cannot fit is bad input and not a process for the kernel's OOM killer. peak_phase names where the peak is.
/// `available` 0: read /proc/meminfo (nothing is checked when it cannot be read).
void check_plan_fits_host(size_t peak_bytes, const std::string& peak_phase, int local_ranks, size_t available = 0);
/// The rule check_plan_fits_host applies: peak_bytes x local_ranks (at least 1) <= available (0: unknown, fits).
bool plan_fits_host(size_t peak_bytes, int local_ranks, size_t available);

/// job collective_bench: the most host bytes a rank holds at once, a lower bound. On the cpu the bench's own buffers
/// of its largest (op, size) point (the whole array; and a rank's chunk for reduce_scatter and all_gather; each point's
/// buffers are freed before the next). On cuda with parallel.comm mpi the communicator's host staging blocks (the
/// whole array; and the chunk for reduce_scatter), which its pool keeps for the whole bench and reuses by best fit
/// (staging_pool_bytes): what every point up to the last that adds a block needs together. With nccl none. The point
/// (the largest; staged, the last that grows the pool) is returned in *op and *size_index when given.
size_t collective_host_bytes(const RunConfig& cfg, int world_size, std::string* op = nullptr,
                             size_t* size_index = nullptr);

/// Raises ConfigError (one line naming the collective.sizes_mb entry, the bytes needed and MemAvailable) when
/// collective_host_bytes(...) x local_ranks exceeds MemAvailable, so a size the host cannot hold is bad input (exit
/// code 2 before any output) and not an out-of-memory record. `available` 0: read /proc/meminfo (nothing is checked
/// when it cannot be read).
void check_collective_host_memory(const RunConfig& cfg, int world_size, int local_ranks, size_t available = 0);

}  // namespace trainer
