// Validation of a resolved config: shapes, enums (schema.h's lists), ranges, files readable, outputs writable and
// never naming an input. Every problem is one ConfigError naming the key.
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <string_view>

#include "config/schema.h"
#include "core/errors.h"
#include "core/memory.h"
#include "io/checkpoint.h"
#include "io/result_record.h"
#include "io/token_data.h"
#include "model/model.h"

namespace trainer {
namespace {

using namespace config_schema;
namespace fs = std::filesystem;

// ---- validation helpers ---------------------------------------------------------------------------------------
void check_enum(const std::string& v, const Names& allowed, const char* key) {
  CONFIG_CHECK(std::find(allowed.begin(), allowed.end(), v) != allowed.end(),
               "config: '{}' must be one of {}; got '{}'", key, fmt::join(allowed, ", "), v);
}
void check_positive(double v, const char* key, std::string_view hint = {}) {
  CONFIG_CHECK(v > 0, "config: '{}' must be > 0, got {}{}", key, v, hint);
}
/// A timeout in seconds: at least 1 (below that every wait for the slowest rank would abort: a step, a checkpoint
/// write, a data check) and at most 1e7 (116 days; the deadlines are clock times in nanoseconds, 2^63 of which are
/// 9.2e9 s).
void check_timeout_s(double v, const char* key) {
  CONFIG_CHECK(v >= 1, "config: '{}' must be >= 1 (seconds; a collective waits for the slowest rank's step, "
               "checkpoint write or read), got {}", key, v);
  CONFIG_CHECK(v <= 1e7, "config: '{}' must be <= 1e7 (seconds: 116 days), got {}", key, v);
}
void check_non_negative(double v, const char* key) {
  CONFIG_CHECK(v >= 0, "config: '{}' must be >= 0, got {}", key, v);
}

/// `p` made absolute with its existing part resolved (symlinked directories, "./", ".."), as the checks below compare.
fs::path resolved(const std::string& p) {
  std::error_code e;
  const fs::path r = fs::weakly_canonical(fs::absolute(p), e);
  return e ? fs::absolute(p).lexically_normal() : r;
}

/// Whether paths `a` and `b` name the same file: the same inode when both exist (hard links, symlinks), else the
/// same resolved path.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  return resolved(a) == resolved(b);
}

/// Whether path `p` lies inside directory `dir` (both resolved; `dir` itself counts).
bool inside_dir(const std::string& p, const std::string& dir) {
  const fs::path rp = resolved(p), rd = resolved(dir);
  auto d = rd.begin(), q = rp.begin();
  for (; d != rd.end() && !d->empty(); ++d, ++q)
    if (q == rp.end() || *q != *d) return false;
  return true;
}

/// Whether `p` is, or lies in, one of the entries of checkpoint directory `dir` that the checkpointer replaces or
/// prunes (io/checkpoint.cpp): latest, model.safetensors (and its temp link), step-*/, .tmp-step-*/.
bool owned_by_checkpointer(const std::string& p, const std::string& dir) {
  if (!inside_dir(p, dir)) return false;
  const fs::path rel = resolved(p).lexically_relative(resolved(dir));
  if (rel.empty() || rel == ".") return false;
  const std::string first = rel.begin()->string();
  return first == "latest" || first.rfind("model.safetensors", 0) == 0 || first.rfind("step-", 0) == 0 ||
         first.rfind(".tmp-step-", 0) == 0;
}

/// An existing regular file that this process can open for reading (a FIFO is refused at once: O_NONBLOCK).
void check_readable_file(const std::string& path, const char* key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw ConfigError(fmt::format("config: cannot read '{}' ({}): {}", path, key, std::strerror(errno)));
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  CONFIG_CHECK(regular, "config: cannot read '{}' ({}): not a regular file", path, key);
}

// Sizes are counted in 64-bit integers (elements, bytes, byte offsets of the flat buffers, and the plan's sums of
// bytes): a product of the config's sizes beyond this many bytes is refused at once, before a dry run or an allocation
// turns it into a crash or a sum that wraps around (a smaller plan for a larger model). Each bound counts 4 bytes an
// element (fp32), the parameters once and one step's largest tensors on every layer; a plan adds up a few copies of
// each (weights, gradients and optimizer state; the tensors a block stores; scores, logits and their gradients), a
// few dozen times 2^56 at most, well below the 2^63 of a signed 64-bit count. 2^56 bytes is 72 PB.
constexpr double kMaxBytes = 72057594037927936.0;  // 2^56
constexpr double kElementBytes = 4;
constexpr double kMiB = 1024.0 * 1024.0;  // collective.sizes_mb counts MiB (2^20 bytes)

struct SizeFactor {
  const char* key;   // "data.batch_size"
  double value;
  double reference;  // its value in the largest preset (10B): the factor furthest above it is named first
};

/// The factor of `fs` furthest above its reference: the key a message names as the one that makes a size large.
const SizeFactor& largest_factor(std::initializer_list<SizeFactor> fs) {
  const SizeFactor* top = fs.begin();
  for (const SizeFactor& f : fs)
    if (f.value / f.reference > top->value / top->reference) top = &f;
  return *top;
}

/// ConfigError naming the largest factor when the product of `fs` (`what`, e.g. "one step's attention scores")
/// times 4 bytes exceeds kMaxBytes.
void check_bytes(const char* what, std::initializer_list<SizeFactor> fs) {
  double product = kElementBytes;
  std::string terms;
  for (const SizeFactor& f : fs) {
    product *= f.value;
    terms += fmt::format("{}{} {}", terms.empty() ? "" : " x ", std::string_view(f.key).substr(
                                                                  std::string_view(f.key).find('.') + 1), f.value);
  }
  const SizeFactor top = largest_factor(fs);
  CONFIG_CHECK(product <= kMaxBytes, "{} = {}: {} would take {} x {} bytes = {:.3g} bytes, beyond the 2^56 (7.2e16) "
               "that the trainer's 64-bit sizes and sums hold", top.key, top.value, what, terms, kElementBytes, product);
}

}  // namespace

double model_param_count(const ModelCfg& m) {
  const double V = m.vocab_size, d = m.d_model, f = m.d_ff, L = m.num_layers;
  return 2 * V * d + L * (4 * d * d + 3 * d * f + 2 * d) + d;
}

/// The model's dims and RoPE base (job train).
static void validate_model(const ModelCfg& m) {
  const std::string_view hint = m.preset.empty() ? " (set it, or choose a model.preset)" : "";
  check_positive(m.vocab_size, "model.vocab_size", hint);
  check_positive(m.context_length, "model.context_length", hint);
  check_positive(m.d_model, "model.d_model", hint);
  check_positive(m.d_ff, "model.d_ff", hint);
  check_positive(m.num_layers, "model.num_layers", hint);
  check_positive(m.num_heads, "model.num_heads", hint);
  check_positive(m.rope_theta, "model.rope_theta");
  CONFIG_CHECK(m.d_model % m.num_heads == 0, "model: d_model {} is not divisible by num_heads {}", m.d_model,
               m.num_heads);
  const int d_head = m.d_model / m.num_heads;
  // The model keeps theta as fp32 (its RoPE tables are computed in double from it): 0 there makes them inf / NaN
  CONFIG_CHECK(float(m.rope_theta) > 0, "model: rope_theta {} is 0 in fp32 (the smallest is about 1.4e-45)",
               m.rope_theta);
  CONFIG_CHECK(std::isfinite(float(m.rope_theta)), "model: rope_theta {} is beyond fp32's range (about 3.4e38)",
               m.rope_theta);
  CONFIG_CHECK(d_head % 2 == 0, "model: d_head {} (d_model {} / num_heads {}) must be even: RoPE rotates pairs",
               d_head, m.d_model, m.num_heads);
}

void validate_config(const RunConfig& c, int world_size, const std::string& config_path, FileChecks files) {
  TRAINER_CHECK(world_size >= 1, "validate_config: world_size {} < 1", world_size);
  check_enum(c.job, kJobs, "job");

  // model: only job train builds one (attention_bench and collective_bench read their own sections); an unknown
  // preset is refused for every job
  const ModelCfg& m = c.model;
  const bool has_model = c.job == "train";
  if (!m.preset.empty()) preset_model(m.preset);  // raises for an unknown name
  if (has_model) validate_model(m);

  // device and numerics
  check_enum(c.device, kDevices, "device");
  check_enum(c.precision, kPrecisions, "precision");
  check_enum(c.attention, kAttention, "attention");
  check_enum(c.fp32_matmul, kFp32Matmul, "fp32_matmul");
  CONFIG_CHECK(!c.deterministic || !c.gemm_autotune.value_or(false),
               "gemm_autotune: true keeps the fastest of cuBLASLt's algorithms by timing, which can pick another one "
               "in another run; with deterministic true leave gemm_autotune null (auto: off) or false");
  CONFIG_CHECK(c.precision != "bf16" || c.device == "cuda",
               "precision: bf16 needs device 'cuda' (the CPU backend is the fp32 reference; bf16_pure runs there with "
               "fp32 activations)");
  CONFIG_CHECK(!bf16_storage(c.precision) || c.parallel.strategy == "none",
               "precision: bf16_pure supports parallel.strategy 'none' (one rank) for now, got '{}'; use precision "
               "bf16 (fp32 master) with the data-parallel strategies and fsdp", c.parallel.strategy);
  CONFIG_CHECK(!c.optimizer.stochastic_rounding || bf16_storage(c.precision),
               "optimizer: stochastic_rounding applies to precision bf16_pure (bf16 weights), got precision '{}'",
               c.precision);

  // checkpointing and parallel
  check_enum(c.checkpointing.policy, kCheckpointPolicies, "checkpointing.policy");
  CONFIG_CHECK(c.checkpointing.k >= 1, "config: 'checkpointing.k' must be >= 1, got {}", c.checkpointing.k);
  check_non_negative(c.checkpointing.lm_head_chunk_tokens, "checkpointing.lm_head_chunk_tokens");
  if (c.checkpointing.blocks && has_model) {
    std::vector<int> seen;
    for (int b : *c.checkpointing.blocks) {
      CONFIG_CHECK(b >= 0 && b < c.model.num_layers,
                   "config: 'checkpointing.blocks' lists block {}, outside [0, {}) (model.num_layers {})", b,
                   c.model.num_layers, c.model.num_layers);
      CONFIG_CHECK(std::find(seen.begin(), seen.end(), b) == seen.end(),
                   "config: 'checkpointing.blocks' lists block {} twice", b);
      seen.push_back(b);
    }
  }
  const ParallelCfg& p = c.parallel;
  check_enum(p.strategy, kStrategies, "parallel.strategy");
  check_enum(p.comm, kComms, "parallel.comm");
  CONFIG_CHECK(p.comm != "nccl" || c.device == "cuda", "parallel: comm 'nccl' needs device 'cuda' (use comm 'mpi')");
  check_positive(p.bucket_mb, "parallel.bucket_mb");
  // the bucket cap counts fp32 elements in 64 bits, as collective.sizes_mb's 2^36 MiB (2^56 bytes) bound
  CONFIG_CHECK(p.bucket_mb <= 68719476736.0, "config: 'parallel.bucket_mb' {:g} is above 2^36 MiB (2^56 bytes); any "
               "value above the model's gradient bytes already makes one bucket", p.bucket_mb);
  check_enum(p.reduce_dtype, kReduceDtypes, "parallel.reduce_dtype");
  CONFIG_CHECK(p.reduce_dtype == "fp32" || p.strategy.rfind("ddp_", 0) == 0,
               "parallel: reduce_dtype 'bf16' applies to the ddp_* strategies, got strategy '{}'", p.strategy);
  CONFIG_CHECK(p.reduce_dtype == "fp32" || (c.device == "cuda" && p.comm != "mpi"),
               "parallel: reduce_dtype 'bf16' needs comm 'nccl' (MPI has no bf16 sum), got device '{}' comm '{}'",
               c.device, p.comm);
  check_non_negative(p.prefetch_layers, "parallel.prefetch_layers");
  check_timeout_s(p.comm_timeout_s, "parallel.comm_timeout_s");
  check_timeout_s(p.startup_timeout_s, "parallel.startup_timeout_s");
  check_timeout_s(p.checkpoint_timeout_s, "parallel.checkpoint_timeout_s");

  // optimizer
  const OptimizerCfg& o = c.optimizer;
  check_non_negative(o.lr, "optimizer.lr");
  CONFIG_CHECK(o.betas.size() == 2, "config: 'optimizer.betas' must have 2 entries [beta1, beta2], got {}",
               o.betas.size());
  for (size_t i = 0; i < 2; ++i)
    CONFIG_CHECK(o.betas[i] >= 0 && o.betas[i] < 1, "config: 'optimizer.betas[{}]' must be in [0, 1), got {}", i,
                 o.betas[i]);
  check_positive(o.eps, "optimizer.eps");
  check_non_negative(o.weight_decay, "optimizer.weight_decay");
  // The kernels take these as fp32: a value that rounds to 0 or beyond fp32's range breaks the update (NaN, inf)
  CONFIG_CHECK(float(o.eps) > 0, "config: 'optimizer.eps' {} is 0 in fp32 (the smallest is about 1.4e-45)", o.eps);
  for (const auto& [v, key] : {std::pair(o.lr, "optimizer.lr"), std::pair(o.weight_decay, "optimizer.weight_decay"),
                               std::pair(o.lr * o.weight_decay, "optimizer.lr x weight_decay"),
                               std::pair(o.min_lr, "optimizer.min_lr")})
    CONFIG_CHECK(v <= std::numeric_limits<float>::max(), "config: '{}' {} is beyond fp32's range (3.4e38)", key, v);
  // The kernels' step size lr * sqrt(1 - beta2^t) / (1 - beta1^t) (fp32) is at most lr / (1 - beta1), for every t
  const double peak_lr = o.schedule == "cosine" ? std::max(o.lr, o.min_lr) : o.lr;
  CONFIG_CHECK(peak_lr / (1 - o.betas[0]) <= std::numeric_limits<float>::max(),
               "config: AdamW's step size lr / (1 - beta1) = {:.3g} / {:.3g} can exceed fp32's range (3.4e38); lower "
               "optimizer.lr or optimizer.betas[0]",
               peak_lr, 1 - o.betas[0]);
  if (o.max_grad_norm) check_positive(*o.max_grad_norm, "optimizer.max_grad_norm");
  // in_backward (and in_gemm, which needs it) each name the setting that rules them out: an explicit true, or
  // in_gemm with in_backward left null (auto: off wherever one of these holds)
  const bool wants_in_backward = o.in_backward.value_or(false) || o.in_gemm.value_or(false);
  const char* what = o.in_backward.value_or(false) ? "in_backward" : "in_gemm (which needs in_backward)";
  CONFIG_CHECK(!wants_in_backward || !o.max_grad_norm,
               "optimizer: {} updates each unit before the global gradient norm is known, so it cannot clip "
               "(optimizer.max_grad_norm {}); set max_grad_norm null or {} false",
               what, o.max_grad_norm.value_or(0.0), o.in_backward.value_or(false) ? "in_backward" : "in_gemm");
  CONFIG_CHECK(!o.in_backward.value_or(false) || c.parallel.strategy == "none" || c.parallel.strategy == "fsdp",
               "optimizer: in_backward is implemented for parallel.strategy 'none' and 'fsdp', got '{}'",
               c.parallel.strategy);
  CONFIG_CHECK(!o.in_gemm.value_or(false) || c.parallel.strategy == "none",
               "optimizer: in_gemm is implemented for parallel.strategy 'none', got '{}'", c.parallel.strategy);
  CONFIG_CHECK(!wants_in_backward || c.job != "train" || c.bench.phase == "train_step",
               "optimizer: {} updates weights inside the backward, but bench.phase '{}' runs no update (use phase "
               "'train_step', or leave optimizer.in_backward and in_gemm null)",
               what, c.bench.phase);
  CONFIG_CHECK(!o.in_gemm.value_or(false) || o.in_backward.value_or(false),
               "optimizer: in_gemm updates each weight inside its backward product, so it needs in_backward; set "
               "optimizer.in_backward true or null (auto)");
  check_non_negative(o.in_gemm_min_elements, "optimizer.in_gemm_min_elements");
  check_enum(o.schedule, kSchedules, "optimizer.schedule");
  check_non_negative(o.warmup_steps, "optimizer.warmup_steps");
  check_non_negative(o.cosine_steps, "optimizer.cosine_steps");
  check_non_negative(o.min_lr, "optimizer.min_lr");
  CONFIG_CHECK(o.schedule != "cosine" || o.cosine_steps == 0 || o.warmup_steps <= o.cosine_steps,
               "optimizer: warmup_steps {} exceeds cosine_steps {}", o.warmup_steps, o.cosine_steps);

  // data
  const DataCfg& d = c.data;
  check_enum(d.source, kSources, "data.source");
  check_enum(d.dtype, kDtypes, "data.dtype");
  check_enum(d.sampling, kSamplings, "data.sampling");
  check_positive(d.batch_size, "data.batch_size");
  if (c.job == "train") {  // only the train job splits the batch over the ranks
    CONFIG_CHECK(d.batch_size % world_size == 0,
                 "data: batch_size {} is not divisible by world_size {} (the global batch is split evenly over the "
                 "ranks; e.g. --set data.batch_size={})",
                 d.batch_size, world_size, (d.batch_size / world_size + 1) * world_size);
    check_positive(d.microbatch_size, "data.microbatch_size", " (or 0 for the whole per-rank batch)");
    const int per_rank = d.batch_size / world_size;
    CONFIG_CHECK(per_rank % d.microbatch_size == 0,
                 "data: per-rank batch {} (batch_size {} / world_size {}) is not divisible by microbatch_size {}",
                 per_rank, d.batch_size, world_size, d.microbatch_size);
  }

  // sizes whose products the trainer counts: the parameters and one step's largest tensors on a rank (its share of
  // the batch; attention scores only where they are materialized, naive attention)
  if (has_model) {
    const int64_t rank_batch =
        c.job == "train" && d.batch_size % world_size == 0 ? d.batch_size / world_size : d.batch_size;
    const ModelCfg big = preset_model("10B");
    const SizeFactor V{"model.vocab_size", double(m.vocab_size), double(big.vocab_size)},
        D{"model.d_model", double(m.d_model), double(big.d_model)},
        F{"model.d_ff", double(m.d_ff), double(big.d_ff)},
        L{"model.num_layers", double(m.num_layers), double(big.num_layers)},
        H{"model.num_heads", double(m.num_heads), double(big.num_heads)},
        T{"model.context_length", double(m.context_length), double(big.context_length)},
        B{rank_batch == d.batch_size ? "data.batch_size" : "data.batch_size / world_size", double(rank_batch), 4.0};
    const double params = model_param_count(m);
    const SizeFactor top = largest_factor({V, D, F, L});
    CONFIG_CHECK(params * kElementBytes <= kMaxBytes, "{} = {}: the model would have {:.3g} parameters, {:.3g} bytes "
                 "in fp32, beyond the 2^56 (7.2e16) that the trainer's 64-bit sizes and sums hold; model: vocab_size "
                 "{}, d_model {}, d_ff {}, num_layers {}", top.key, top.value, params, params * kElementBytes,
                 m.vocab_size, m.d_model, m.d_ff, m.num_layers);
    check_bytes("one step's activations on every layer", {B, T, m.d_ff > m.d_model ? F : D, L});
    if (c.attention != "flash2") check_bytes("one step's attention scores on every layer", {B, H, T, T, L});
    check_bytes("one step's logits", {B, T, V});
  }

  // collective_bench
  const CollectiveCfg& cc = c.collective;
  CONFIG_CHECK(!cc.ops.empty(), "config: 'collective.ops' must name at least one of {}", one_of(kCollectiveOps));
  for (size_t i = 0; i < cc.ops.size(); ++i)
    check_enum(cc.ops[i], kCollectiveOps, fmt::format("collective.ops[{}]", i).c_str());
  CONFIG_CHECK(!cc.sizes_mb.empty(), "config: 'collective.sizes_mb' must hold at least one size");
  for (size_t i = 0; i < cc.sizes_mb.size(); ++i) {
    check_positive(cc.sizes_mb[i], fmt::format("collective.sizes_mb[{}]", i).c_str());
    // The bench counts a size in 64-bit bytes and elements (a size near 2^63 bytes had wrapped and been asked of the
    // allocator, an out-of-memory record): the same bound as the model's sizes, 2^56 bytes = 2^36 MiB.
    const double bytes = cc.sizes_mb[i] * kMiB;
    CONFIG_CHECK(bytes <= kMaxBytes, "collective.sizes_mb[{}] = {}: {:.3g} bytes, beyond the 2^56 (7.2e16) that the "
                 "trainer's 64-bit sizes and sums hold (at most 2^36 = {:.0f} MiB)", i, cc.sizes_mb[i], bytes,
                 kMaxBytes / kMiB);
    // at least one fp32 element (one per rank for reduce_scatter / all_gather: collective_elements rounds the count
    // down to a multiple of the ranks), else the bench would time an empty collective
    if (c.job == "collective_bench") {
      const int64_t elements = int64_t(bytes) / 4;
      const bool per_rank = std::any_of(cc.ops.begin(), cc.ops.end(), [](const std::string& op) {
        return op != "all_reduce";
      });
      const int64_t need = per_rank ? world_size : 1;
      CONFIG_CHECK(elements >= need,
                   "collective.sizes_mb[{}] = {}: {} fp32 element(s), fewer than {} ({}); give at least {:.3g} MiB",
                   i, cc.sizes_mb[i], elements, need,
                   per_rank ? fmt::format("one per rank for {}", fmt::join(cc.ops, ", ")) : std::string("one"),
                   double(need) * 4 / kMiB);
    }
  }
  check_non_negative(cc.warmup, "collective.warmup");
  // attention_bench
  const AttentionBenchCfg& ab = c.attention_bench;
  CONFIG_CHECK(!ab.grids.empty(), "config: 'attention_bench.grids' must name at least one of {}",
               one_of(kAttnBenchGrids));
  for (size_t i = 0; i < ab.grids.size(); ++i)
    check_enum(ab.grids[i], kAttnBenchGrids, fmt::format("attention_bench.grids[{}]", i).c_str());
  CONFIG_CHECK(!ab.impls.empty(), "config: 'attention_bench.impls' must name at least one of {}",
               one_of(kAttnBenchImpls));
  for (size_t i = 0; i < ab.impls.size(); ++i)
    check_enum(ab.impls[i], kAttnBenchImpls, fmt::format("attention_bench.impls[{}]", i).c_str());
  CONFIG_CHECK(ab.max_seq >= 128 && ab.max_seq <= (1 << 20),
               "config: 'attention_bench.max_seq' must be in [128, 1048576], got {}", ab.max_seq);
  // grid a's shortest sequence is 256 (jobs/attention_bench.cpp), grid b's 128: a table with no row measures nothing
  CONFIG_CHECK(c.job != "attention_bench" || ab.max_seq >= 256 ||
                   std::find(ab.grids.begin(), ab.grids.end(), "b") != ab.grids.end(),
               "attention_bench: max_seq {} leaves grid a no point (its sequences are 256 to 16384): raise max_seq "
               "or add grid b", ab.max_seq);
  CONFIG_CHECK(c.job != "attention_bench" || c.bench.measure_steps >= 1,
               "attention_bench: bench.measure_steps is its timed calls a point and must be >= 1, got {}",
               c.bench.measure_steps);
  CONFIG_CHECK(cc.iters >= 1, "config: 'collective.iters' must be >= 1, got {}", cc.iters);
  check_enum(cc.dtype, kCollectiveDtypes, "collective.dtype");

  // bench
  const BenchCfg& b = c.bench;
  check_enum(b.phase, kPhases, "bench.phase");
  check_non_negative(b.warmup_steps, "bench.warmup_steps");
  check_non_negative(b.measure_steps, "bench.measure_steps");
  CONFIG_CHECK(int64_t(b.warmup_steps) + b.measure_steps >= 1,
               "bench: warmup_steps + measure_steps must be at least one step, got {} + {}", b.warmup_steps,
               b.measure_steps);
  CONFIG_CHECK(int64_t(b.warmup_steps) + b.measure_steps <= 1000000000,
               "bench: warmup_steps + measure_steps must be at most 1e9, got {} + {}", b.warmup_steps,
               b.measure_steps);
  check_non_negative(b.log_every, "bench.log_every");
  // (world_size: the ranks started, or --plan's --world-size)
  CONFIG_CHECK(c.job != "train" || c.parallel.strategy != "none" || world_size == 1,
               "parallel.strategy: 'none' runs one process, but the world size is {} ({})", world_size,
               bf16_storage(c.precision) ? "precision bf16_pure runs on strategy none only: run one process, or use "
                                           "precision bf16 with ddp_*, zero1 or fsdp"
                                         : "use ddp_naive, ddp_flat, ddp_overlap, ddp_bucketed, zero1 or fsdp");
  CONFIG_CHECK(!c.profile.trace || c.job == "train",
               "profile.trace: only job 'train' records Chrome traces (job is '{}'); remove the key or set null", c.job);
  CONFIG_CHECK(!c.profile.memory_timeline || c.job == "train",
               "profile.memory_timeline: only job 'train' logs its allocations (job is '{}'); remove the key or set "
               "null", c.job);

  // files: inputs first, then outputs (check_output_path creates directories, so it runs only for a valid config)
  const auto here = [files](const std::string& path) {  // an input checked (FileChecks::present: where it exists)
    std::error_code ec;
    return files == FileChecks::all || std::filesystem::exists(path, ec);
  };
  if (d.source == "tokens" && has_model) {  // (the benchmark jobs read no data)
    CONFIG_CHECK(d.path && !d.path->empty(), "data: source 'tokens' needs data.path (a flat binary token file)");
    if (here(*d.path)) check_token_file(*d.path, d.dtype, m.vocab_size, m.context_length);
  }
  if (c.init.weights && here(*c.init.weights)) {
    check_readable_file(*c.init.weights, "init.weights");
    if (has_model) check_weights_file(m, *c.init.weights, "init.weights");  // its header: tensors, shapes, dtypes
  }
  check_non_negative(c.output.checkpoint_every, "output.checkpoint_every");
  CONFIG_CHECK(c.output.checkpoint_every == 0 || c.output.checkpoint,
               "output.checkpoint_every: {} needs output.checkpoint (the directory to write to)",
               c.output.checkpoint_every);
  CONFIG_CHECK(!c.output.checkpoint || c.job == "train", "output.checkpoint: only job 'train' writes checkpoints "
               "(job is '{}'); remove the key or set null", c.job);
  CONFIG_CHECK(!c.output.checkpoint || c.job != "train" || c.bench.phase == "train_step",
               "output.checkpoint: a checkpoint is a training run's state, but bench.phase '{}' makes no update (and "
               "holds no AdamW state); remove the key or set bench.phase train_step", c.bench.phase);
  if (c.init.resume) {
    CONFIG_CHECK(!c.init.resume->empty(), "init.resume: the path is empty (remove the key or set null)");
    CONFIG_CHECK(!c.init.weights, "init: set init.weights or init.resume, not both (a resume loads the checkpoint's "
                 "weights)");
    CONFIG_CHECK(c.job == "train", "init.resume: only job 'train' resumes (job is '{}')", c.job);
    CONFIG_CHECK(c.bench.phase == "train_step", "init.resume: only bench.phase 'train_step' trains (phase is '{}')",
                 c.bench.phase);
    if (here(*c.init.resume)) check_resume(c);  // a complete checkpoint of this model and precision, with steps left
  }

  // The run's inputs, which no output may overwrite: the config file, the token file, the initial weights.
  const std::pair<const char*, std::optional<std::string>> inputs[] = {
      {"the config file", config_path.empty() ? std::nullopt : std::optional<std::string>(config_path)},
      {"data.path", d.source == "tokens" ? d.path : std::nullopt},
      {"init.weights", c.init.weights}};
  const std::pair<const char*, const std::optional<std::string>*> outputs[] = {
      {"output.results", &c.output.results},
      {"output.checkpoint", &c.output.checkpoint},
      {"profile.trace", &c.profile.trace},
      {"profile.memory_timeline", &c.profile.memory_timeline}};
  for (const auto& [key, value] : outputs)  // before any path arithmetic: fs::absolute("") throws
    CONFIG_CHECK(!*value || !(*value)->empty(), "{}: the output path is empty (remove the key or set null)", key);
  for (size_t i = 0; i < std::size(outputs); ++i) {
    if (!*outputs[i].second) continue;
    for (size_t k = 0; k < i; ++k)
      if (*outputs[k].second)
        CONFIG_CHECK(!same_file(**outputs[i].second, **outputs[k].second),
                     "output: '{}' and '{}' name the same file '{}'", outputs[k].first, outputs[i].first,
                     **outputs[i].second);
    // Ranks r > 0 write their memory timelines beside rank 0's (memory_timeline_path): those names must not be taken.
    if (outputs[i].second == &c.profile.memory_timeline)
      for (int r = 1; r < std::min(world_size, 4096); ++r)
        for (size_t k = 0; k < std::size(outputs); ++k)
          if (k != i && *outputs[k].second)
            CONFIG_CHECK(!same_file(memory_timeline_path(**outputs[i].second, r), **outputs[k].second),
                         "output: rank {}'s memory timeline '{}' (profile.memory_timeline) is also '{}'", r,
                         memory_timeline_path(**outputs[i].second, r), outputs[k].first);
    // The checkpoint directories belong to the checkpointer (latest, step-*/, model.safetensors): no other output
    // may be written into them (it would replace a pointer, a manifest or the exported weights).
    if (outputs[i].second != &c.output.checkpoint)
      for (const auto& [dir_key, dir] : {std::pair<const char*, const std::optional<std::string>*>{
                                             "output.checkpoint", &c.output.checkpoint},
                                         {"init.resume", &c.init.resume}})
        if (*dir && !(*dir)->empty())
          CONFIG_CHECK(!inside_dir(**outputs[i].second, **dir),
                       "{}: '{}' lies inside the checkpoint directory '{}' ({}), which the checkpoints own; write it "
                       "elsewhere", outputs[i].first, **outputs[i].second, **dir, dir_key);
    // An output must never overwrite an input (`inputs` above).
    const int ranks = outputs[i].second == &c.profile.memory_timeline ? std::min(world_size, 4096) : 1;
    for (const auto& [in_key, in_value] : inputs)
      for (int r = 0; in_value && r < ranks; ++r) {
        const std::string out = r == 0 ? **outputs[i].second : memory_timeline_path(**outputs[i].second, r);
        CONFIG_CHECK(!same_file(out, *in_value), "{}: '{}'{} is also the input {} ('{}'); the run would overwrite it",
                     outputs[i].first, out, r == 0 ? "" : fmt::format(" (rank {}'s file)", r), in_key, *in_value);
      }
  }
  if (c.output.checkpoint) {
    // The checkpointer replaces DIR/latest and DIR/model.safetensors and prunes DIR/step-*/ to the last two: no input
    // may be one of them (init.resume is read whole at the start; resuming into the same directory is how a run
    // continues), and a directory that holds something else is not taken over.
    const std::string& ck = *c.output.checkpoint;
    for (const auto& [in_key, in_value] : inputs)
      CONFIG_CHECK(!in_value || !owned_by_checkpointer(*in_value, ck),
                   "output.checkpoint: '{}' holds the input {} ('{}'), which the checkpointer would replace or prune "
                   "(latest, model.safetensors, step-*/); copy it elsewhere or write the checkpoints to another "
                   "directory", ck, in_key, *in_value);
    // Without `latest`, only what the checkpointer itself leaves when it is stopped before its first `latest` may be
    // there (a requeued run continues in it)
    std::error_code ec;
    if (files == FileChecks::all && fs::is_directory(ck, ec) && !fs::exists(fs::path(ck) / "latest", ec))
      for (const auto& e : fs::directory_iterator(ck, ec)) {
        const std::string n = e.path().filename().string();
        CONFIG_CHECK(left_before_first_latest(ck, n),
                     "output.checkpoint: '{}' is a directory with other things in it ('{}') and no checkpoint (no "
                     "'latest'); the checkpointer would replace or prune what it finds there: give an empty or new "
                     "directory", ck, n);
      }
  }
  CONFIG_CHECK(!c.output.checkpoint || fs::path(*c.output.checkpoint).extension() != ".safetensors",
               "output.checkpoint: '{}' looks like a file, but it names a directory now (the weights go to "
               "DIR/model.safetensors); give a directory", *c.output.checkpoint);
  if (files == FileChecks::present) return;  // the outputs' writability: the run's (the plan writes none)
  // check_output_path creates nothing (the writers make missing directories), so a rejected config leaves no trace.
  // output.checkpoint is a directory: its files are checked like any output file.
  if (c.output.checkpoint) check_output_path((fs::path(*c.output.checkpoint) / "latest").string(), "output.checkpoint");
  for (const auto& [key, value] : outputs)
    if (*value && value != &c.output.checkpoint) check_output_path(**value, key);
  if (c.profile.memory_timeline)  // ranks r > 0 write beside rank 0 (the same directory): what is at their names
    for (int r = 1; r < std::min(world_size, 4096); ++r) {
      const std::string path = memory_timeline_path(*c.profile.memory_timeline, r);
      std::error_code ec;
      if (fs::exists(fs::symlink_status(path, ec)))
        check_output_path(path, fmt::format("profile.memory_timeline (rank {}'s file)", r));
    }
  if (!c.output.results) check_output_path(default_results_path(c.name), "output.results");
}

}  // namespace trainer
