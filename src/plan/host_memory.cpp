// Host memory lower bound and its check (see host_memory.h).
#include "plan/host_memory.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/memory.h"
#include "dist/mpi_communicator.h"
#include "io/checkpoint.h"
#include "jobs/job.h"

namespace trainer {

namespace {

size_t clamp_bytes(double b) { return b >= 9e18 ? size_t(9e18) : size_t(b); }

/// The model key that makes the model large, and its value: the one furthest above the largest preset's (10B).
std::pair<const char*, int> dominant_key(const ModelCfg& m) {
  const ModelCfg big = preset_model("10B");
  const std::tuple<const char*, int, int> keys[] = {{"model.num_layers", m.num_layers, big.num_layers},
                                                    {"model.d_model", m.d_model, big.d_model},
                                                    {"model.d_ff", m.d_ff, big.d_ff},
                                                    {"model.vocab_size", m.vocab_size, big.vocab_size}};
  const auto ratio = [](const auto& k) { return double(std::get<1>(k)) / std::get<2>(k); };
  const auto* best = &keys[0];
  for (const auto& k : keys)
    if (ratio(k) > ratio(*best)) best = &k;
  if (ratio(*best) <= 1) return {nullptr, 0};  // no key beyond the largest preset's: the model as a whole
  return {std::get<0>(*best), std::get<1>(*best)};
}

}  // namespace

std::string weights_file_path(const RunConfig& cfg) {
  if (cfg.job != "train") return "";
  if (cfg.init.weights) return *cfg.init.weights;
  if (cfg.init.resume && !cfg.init.resume_step_dir.empty()) return checkpoint_weights_path(cfg.init.resume_step_dir);
  return "";
}

HostNeed host_memory_needed(const RunConfig& cfg, int world_size, int local_ranks, bool dry_run) {
  HostNeed n;
  n.bookkeeping = clamp_bytes(double(cfg.model.num_layers) * kBookkeepingBytesPerBlock);
  const double rank_tokens = double(cfg.data.batch_size) / std::max(1, world_size) * cfg.model.context_length;
  if (dry_run) {
    n.tokens = clamp_bytes(kDryRunTokenBytes * rank_tokens);
    return n;
  }
  n.tokens = clamp_bytes((kRunTokenBytes + (cfg.device == "cpu" ? kCpuTokenBytes : 0)) * rank_tokens *
                         std::max(1, local_ranks));
  if (const std::string file = weights_file_path(cfg); !file.empty()) {  // (unreadable: validate_config says so)
    std::error_code ec;
    const auto size = std::filesystem::file_size(file, ec);
    if (!ec) n.weights_file = clamp_bytes(double(size) * std::max(1, local_ranks));
  }
  if (cfg.device != "cpu") return n;
  const double p = model_param_count(cfg.model), w = world_size;
  const std::string& s = cfg.parallel.strategy;
  // bytes of an element: bf16_pure keeps weights, gradients and m, v in bf16; in_backward has no flat gradients
  // (fsdp's accumulator exists where a step has several microbatches: this stays a lower bound)
  const double e = cfg.precision == "bf16_pure" ? 2 : 4;
  const double weights = e * p / (s == "fsdp" ? w : 1);
  const double grads = cfg.optimizer.in_backward.value_or(false) ? 0 : e * p / (s == "fsdp" ? w : 1);
  const double adam = 2 * e * p / (s == "zero1" || s == "fsdp" ? w : 1);
  n.tensors = clamp_bytes((weights + grads + adam) * std::max(1, local_ranks));
  return n;
}

size_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    size_t kib = 0;
    in >> kib;
    return kib * 1024;
  }
  return 0;
}

void check_host_memory(const RunConfig& cfg, int world_size, int local_ranks, bool dry_run, size_t available) {
  if (available == 0) available = host_memory_available();
  if (available == 0) return;  // no /proc/meminfo: nothing to compare with
  const HostNeed n = host_memory_needed(cfg, world_size, local_ranks, dry_run);
  if (n.total() <= available) return;
  const ModelCfg& m = cfg.model;
  const std::string on_host = local_ranks > 1 ? fmt::format(" of {} ranks on this host", local_ranks) : "";
  std::string what, sizes;
  std::pair<const char*, int> key;
  const bool reading_weights =
      n.weights_file >= n.tokens && n.weights_file >= n.tensors && n.weights_file >= n.bookkeeping;
  const char* weights_key = cfg.init.weights ? "init.weights" : "init.resume";
  if (reading_weights) {
    what = fmt::format("{} for the weights file ({}), read whole {}", format_bytes(n.weights_file), weights_key,
                       local_ranks > 1 ? fmt::format("by each of the {} ranks on this host", local_ranks)
                                       : std::string("while the run loads it"));
    sizes = fmt::format("'{}' holds {}", weights_file_path(cfg),
                        format_bytes(n.weights_file / size_t(std::max(1, local_ranks))));
  } else if (n.tokens >= n.tensors && n.tokens >= n.bookkeeping) {  // one step's token ids (and losses)
    what = fmt::format("{} for one step's token ids{}", format_bytes(n.tokens), on_host);
    sizes = fmt::format("data: batch_size {} over {} rank(s), model: context_length {}", cfg.data.batch_size,
                        world_size, m.context_length);
    // The key further above its value in the largest preset (10B: batch 4, context 512).
    key = double(cfg.data.batch_size) / 4 >= double(m.context_length) / 512
              ? std::pair("data.batch_size", cfg.data.batch_size)
              : std::pair("model.context_length", m.context_length);
  } else {
    what = n.tensors > n.bookkeeping
               ? fmt::format("{} for the weights{} and AdamW state ({}) on the cpu{}", format_bytes(n.tensors),
                             cfg.optimizer.in_backward.value_or(false) ? "" : ", gradients",
                             cfg.precision == "bf16_pure" ? "bf16" : "fp32", on_host)
               : fmt::format("{} for the bookkeeping of {} blocks", format_bytes(n.bookkeeping), m.num_layers);
    sizes = fmt::format("model: vocab_size {}, d_model {}, d_ff {}, num_layers {}", m.vocab_size, m.d_model, m.d_ff,
                        m.num_layers);
    key = n.tensors > n.bookkeeping ? dominant_key(m) : std::pair("model.num_layers", m.num_layers);
  }
  // The key to blame; a model no larger than the largest preset in any dimension is named as a whole
  const std::string blamed = reading_weights ? std::string(weights_key)
                             : key.first     ? fmt::format("{} = {}", key.first, key.second)
                             : m.preset.empty() ? std::string("model")
                                                : fmt::format("model.preset = {}", m.preset);
  throw ConfigError(fmt::format(
      "{}: {} needs at least {} of host memory ({}), but {} is available (MemAvailable in /proc/meminfo); {}", blamed,
      dry_run ? "the plan's dry run" : "the run", format_bytes(n.total()), what, format_bytes(available), sizes));
}

void check_plan_fits_host(size_t peak_bytes, const std::string& peak_phase, int local_ranks, size_t available) {
  if (available == 0) available = host_memory_available();
  const size_t ranks = size_t(std::max(1, local_ranks)), need = peak_bytes * ranks;
  CONFIG_CHECK(plan_fits_host(peak_bytes, local_ranks, available),
               "the run needs {} of host memory at its peak ({} a rank x {} on this host, in its {} phase as planned), "
               "but {} is available (MemAvailable in /proc/meminfo); lower data.batch_size or data.microbatch_size, "
               "set checkpointing.policy, or use a smaller model",
               format_bytes(need), format_bytes(peak_bytes), ranks, peak_phase, format_bytes(available));
}

bool plan_fits_host(size_t peak_bytes, int local_ranks, size_t available) {
  return available == 0 || peak_bytes * size_t(std::max(1, local_ranks)) <= available;
}

size_t collective_host_bytes(const RunConfig& cfg, int world_size, std::string* op, size_t* size_index) {
  const int n = std::max(1, world_size);
  const bool cpu = cfg.device == "cpu", staged = !cpu && cfg.parallel.comm == "mpi";
  if (!cpu && !staged) return 0;  // nccl on cuda: device buffers only
  std::vector<std::pair<std::string, size_t>> points;  // (op, size index) in the bench's order: every size of an
  std::vector<size_t> bytes;                            // op, then the next op; what each point needs
  std::vector<std::vector<size_t>> staging;             // staged: the pool's blocks of each point
  for (const std::string& o : cfg.collective.ops) {
    for (size_t i = 0; i < cfg.collective.sizes_mb.size(); ++i) {
      const double whole = 4.0 * double(collective_elements(o, cfg.collective.sizes_mb[i], n));
      points.emplace_back(o, i);
      if (cpu) {  // the bench's buffers, freed before the next point; reduce_scatter's output and all_gather's input
                  // are a second buffer of one chunk
        bytes.push_back(clamp_bytes(whole + (o != "all_reduce" ? whole / n : 0)));
      } else {  // reduce_scatter stages its input, then its output; all_reduce its buffer, all_gather its output
        staging.push_back({clamp_bytes(whole)});
        if (o == "reduce_scatter") staging.back().push_back(clamp_bytes(whole / n));
      }
    }
  }
  // staged: the blocks are kept, so a point needs what every point up to it made the pool add
  if (!cpu) staging_pool_bytes(staging, &bytes);
  size_t most = 0;
  for (size_t k = 0; k < points.size(); ++k) {
    if (bytes[k] <= most) continue;
    most = bytes[k];
    if (op) *op = points[k].first;
    if (size_index) *size_index = points[k].second;
  }
  return most;
}

void check_collective_host_memory(const RunConfig& cfg, int world_size, int local_ranks, size_t available) {
  if (available == 0) available = host_memory_available();
  if (available == 0) return;  // no /proc/meminfo: nothing to compare with
  std::string op;
  size_t i = 0;
  const size_t rank_bytes = collective_host_bytes(cfg, world_size, &op, &i);
  const size_t ranks = size_t(std::max(1, local_ranks));
  const double need = double(rank_bytes) * double(ranks);
  const std::string what =
      cfg.device == "cpu"
          ? fmt::format("{}'s buffers of {} a rank x {} rank(s) on this host", op, format_bytes(rank_bytes), ranks)
          : fmt::format("host staging of {} a rank, the blocks parallel.comm mpi keeps from every point up to {} of "
                        "this size, x {} rank(s) on this host", format_bytes(rank_bytes), op, ranks);
  CONFIG_CHECK(need <= double(available),
               "collective.sizes_mb[{}] = {}: collective_bench needs at least {} of host memory ({}), but {} is "
               "available (MemAvailable in /proc/meminfo); use smaller or fewer sizes",
               i, cfg.collective.sizes_mb[i], format_bytes(clamp_bytes(need)), what, format_bytes(available));
}

}  // namespace trainer
