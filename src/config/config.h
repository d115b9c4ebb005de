// RunConfig: one JSON file describes a run; every key has a default (configs/README.md lists them all).
//
// load_config() reads the file, applies `--set key.path=value` overrides, rejects unknown keys and wrong types,
// resolves the model preset and validates the whole config. Every problem raises ConfigError with one message
// naming the key, before any work or output happens (main() prints it and exits with code 2).
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace trainer {

using json = nlohmann::json;

struct ModelCfg {
  std::string preset = "";   // tiny | small | medium | large | xl | 10B | leaderboard_8b, or "" for explicit dims
  int vocab_size = 0;        // 0: from the preset
  int context_length = 0;
  int d_model = 0;
  int d_ff = 0;
  int num_layers = 0;
  int num_heads = 0;
  double rope_theta = 10000.0;
};

struct CheckpointingCfg {
  std::string policy = "selective";  // none | selective | full | every_k | sqrt | nested (model/activations.h)
  int k = 2;                         // every_k: blocks per recomputed segment
  std::optional<std::vector<int>> blocks;  // only these blocks are checkpointed (null: the policy's choice)
  int lm_head_chunk_tokens = 0;      // tokens per chunk of the fused LM head + loss; 0: auto (<= 1 GiB of head buffers)
  bool keep_attention = false;       // recomputed blocks keep attention's output and logsumexp from the forward
};

struct ParallelCfg {
  std::string strategy = "none";  // none | ddp_naive | ddp_flat | ddp_overlap | ddp_bucketed | zero1 | fsdp
  std::string comm = "auto";      // auto (nccl on cuda, else mpi) | nccl | mpi
  double bucket_mb = 25.0;        // ddp_bucketed bucket size, MiB of fp32 gradients
  std::string reduce_dtype = "fp32";  // fp32 | bf16: dtype in which DDP sums gradients over ranks (bf16: nccl)
  int prefetch_layers = 2;         // fsdp: units gathered ahead of use (parallel/fsdp_buffers.h)
  double comm_timeout_s = 300.0;  // a collective not done after this aborts every rank
  double startup_timeout_s = 600.0;  // how long the ranks wait for each other at start-up (loading configs, data)
  double checkpoint_timeout_s = 3600.0;  // how long the ranks wait for each other around checkpoint writes and reads
};

struct OptimizerCfg {
  double lr = 1e-3;
  std::vector<double> betas{0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::optional<double> max_grad_norm;  // null: no clipping
  std::optional<bool> in_backward;      // AdamW for each unit as soon as its gradient is final (strategy none or
                                        //   fsdp, no clipping); gradients then live per unit, never all at once;
                                        //   null (auto): resolve.cpp turns it on wherever it can run
  std::optional<bool> in_gemm;          // with in_backward (strategy none): each weight matrix's AdamW in the epilogue of its weight-
                                        //   gradient product on the step's last microbatch (Backend::matmul_dw_adamw);
                                        //   null (auto): resolve.cpp turns it on for none, cuda bf16, in_backward
  int in_gemm_min_elements = 1 << 23;   // in_gemm: only products [M, N] of at least this many elements
                                        //   (smaller ones lose: kernels/dw_adamw/NOTES.md)
  bool stochastic_rounding = false;     // bf16_pure: round the updated weights stochastically (else to nearest)
  std::string schedule = "constant";    // constant | cosine (linear warm-up, cosine decay to min_lr)
  int warmup_steps = 0;                 // schedule warm-up iterations
  int cosine_steps = 0;                 // end of the cosine cycle (iterations); 0: the run's total steps
  double min_lr = 0.0;
};

struct DataCfg {
  std::string source = "random";       // random (seeded uniform tokens) | tokens (flat binary file)
  std::optional<std::string> path;     // token file for source = tokens
  std::string dtype = "uint16";        // uint16 | uint32 token ids in the file
  std::string sampling = "random";     // random windows | sequential: row i of step s starts at token
                                       //   ((s*rows + i) * context_length) mod (n - context_length)
  int batch_size = 4;                  // global batch (rows of context_length tokens), split over ranks
  int microbatch_size = 0;             // rows per forward/backward on one rank; 0: the whole per-rank batch
  uint64_t seed = 0;
};

struct BenchCfg {
  std::string phase = "train_step";  // forward | forward_backward | train_step
  int warmup_steps = 5;              // steps run before timing starts (they train too)
  int measure_steps = 10;            // timed steps
  int log_every = 1;                 // progress line every N steps (0: none)
};

struct InitCfg {
  std::optional<std::string> weights;  // safetensors file to start from; null: random init with `seed`
  std::optional<std::string> resume;   // checkpoint directory (output.checkpoint of an earlier run) to continue from
  uint64_t seed = 0;
  // Not a config key (schema.h lists none; never in the JSON): init.resume's step directory as load_config resolved
  // it, so that its 'latest' is read once in a process and every later read (the checks, the warnings, the weights,
  // the optimizer state) is of that step (io/checkpoint.h resume_step_dir). "": not resolved (no init.resume, or it
  // failed: the validation says why).
  std::string resume_step_dir;
};

struct OutputCfg {
  std::optional<std::string> results;     // result record path; null: results/runs/<name>-<time>.json
  std::optional<std::string> checkpoint;  // checkpoint directory (io/checkpoint.h) written at the end; null: none
  int checkpoint_every = 0;               // also write it every N steps; 0: only at the end
};

struct ProfileCfg {
  bool nvtx = false;
  std::optional<std::string> trace;            // Chrome trace path
  std::optional<std::string> memory_timeline;  // memory timeline path
};

struct CollectiveCfg {              // job collective_bench (src/jobs/collective_bench.cpp)
  std::vector<std::string> ops{"all_reduce", "reduce_scatter", "all_gather"};
  std::vector<double> sizes_mb{1, 10, 100, 1000};  // MiB of the whole array (nccl-tests "size")
  int warmup = 5;                  // untimed operations per size
  int iters = 20;                  // timed operations per size
  std::string dtype = "f32";       // f32 (the communicators move f32)
};

struct AttentionBenchCfg {        // job attention_bench (src/jobs/attention_bench.cpp)
  std::vector<std::string> grids{"a", "b"};         // a: batch 8, no mask; b: batch 1, causal
  std::vector<std::string> impls{"naive", "flash2"};  // the attention implementations compared
  int max_seq = 65536;             // the longest sequence of either grid
};

struct RunConfig {
  std::string job = "train";       // train | attention_bench | collective_bench
  std::string name = "";           // used in default output names; "": the config file's stem
  ModelCfg model;
  std::string device = "auto";     // auto (cuda when available) | cpu | cuda
  std::string precision = "fp32";  // fp32 | bf16 (mixed: fp32 master weights, bf16 activations; cuda only) |
                                   //   bf16_pure (weights, gradients, AdamW state and activations in bf16)
  std::string fp32_matmul = "ieee";  // ieee | tf32 | 3xtf32 (cuda; see schema.h)
  std::optional<bool> gemm_autotune;  // cuda: time cuBLASLt's candidate algorithms per GEMM shape once, keep the
                                      //   fastest; null (auto): true unless deterministic
  bool deterministic = false;  // cuda: bitwise repeatable steps (the attention backward's dQ summed in a fixed order,
                               //   no timed algorithm choice); see schema.h
  std::string attention = "auto";  // auto (flash2 for bf16 on cuda, else naive) | naive | flash2
  bool cuda_graph = true;  // capture the train step in a CUDA graph where it can be (jobs/train.cpp; schema.h)
  CheckpointingCfg checkpointing;
  ParallelCfg parallel;
  OptimizerCfg optimizer;
  DataCfg data;
  BenchCfg bench;
  InitCfg init;
  OutputCfg output;
  ProfileCfg profile;
  CollectiveCfg collective;
  AttentionBenchCfg attention_bench;
};

/// gemm_autotune as resolved (resolve.cpp fills it so; a config built in code may leave it null): the key's value,
/// or, null (auto), on unless deterministic.
inline bool gemm_autotune_on(const RunConfig& c) { return c.gemm_autotune.value_or(!c.deterministic); }
/// Whether the run's microbatches go backward: bench.phase forward_backward or train_step, not forward.
inline bool phase_has_backward(const BenchCfg& b) { return b.phase != "forward"; }

/// JSON (de)serialisation. to_json writes every key (std::optional fields as null). from_json overlays the keys
/// present in `j` on the struct's current values (absent keys keep them) and raises ConfigError naming the dotted key
/// for an unknown key ("config: unknown key 'optimizer.lrr'") or a wrong type ("config: 'data.batch_size' must be an
/// integer, got string"). The sub-struct versions name keys relative to their section ("model.d_model").
void to_json(json& j, const RunConfig& c);
void from_json(const json& j, RunConfig& c);
void to_json(json& j, const ModelCfg& c);
void from_json(const json& j, ModelCfg& c);
void to_json(json& j, const CheckpointingCfg& c);
void from_json(const json& j, CheckpointingCfg& c);
void to_json(json& j, const ParallelCfg& c);
void from_json(const json& j, ParallelCfg& c);
void to_json(json& j, const OptimizerCfg& c);
void from_json(const json& j, OptimizerCfg& c);
void to_json(json& j, const DataCfg& c);
void from_json(const json& j, DataCfg& c);
void to_json(json& j, const BenchCfg& c);
void from_json(const json& j, BenchCfg& c);
void to_json(json& j, const InitCfg& c);
void from_json(const json& j, InitCfg& c);
void to_json(json& j, const OutputCfg& c);
void from_json(const json& j, OutputCfg& c);
void to_json(json& j, const ProfileCfg& c);
void from_json(const json& j, ProfileCfg& c);
void to_json(json& j, const CollectiveCfg& c);
void from_json(const json& j, CollectiveCfg& c);
void to_json(json& j, const AttentionBenchCfg& c);
void from_json(const json& j, AttentionBenchCfg& c);

/// Where this rank runs, as far as resolving parallel.comm cares (main fills it from MpiSession and the CUDA runtime).
struct HostInfo {
  int local_size = 1;    // ranks on this host
  int cuda_devices = 0;  // CUDA devices this rank sees; 0: unknown or none (no check)
  bool nccl = true;      // this trainer was built with NCCL (main passes build::kHaveNccl; callers that know no
                         // host, e.g. --plan for a GPU cluster and tests, assume an NCCL build)
};

/// parallel.comm resolved, and a warning for the log ("" when none).
struct CommChoice {
  std::string comm;
  std::string warning;
};

/// Resolves parallel.comm `comm` (auto | nccl | mpi, as written) for the resolved `device` on `host`. NCCL needs a
/// GPU of its own per rank (ranks pick GPU local_rank % cuda_devices, so more ranks than GPUs share one). auto: nccl
/// on cuda, else mpi; on cuda with ranks sharing a GPU, or in a build without NCCL (host.nccl false), mpi with a
/// warning. nccl with ranks sharing a GPU or without NCCL in the build: ConfigError naming parallel.comm=mpi (NCCL
/// would fail or hang). Other values are returned unchanged (validation rejects unknown ones).
CommChoice resolve_comm(const std::string& comm, const std::string& device, const HostInfo& host);

/// How validate_config treats the files a config names. all: inputs readable and of the right form, outputs writable
/// (a run). present: the inputs that exist here are checked, missing ones and the outputs' writability are not
/// (--plan and --print-config, which need none of them: a cluster's config read on another machine).
enum class FileChecks { all, present };

/// Reads `path` (or the embedded default when path is empty), applies overrides ("key.path=value"; the value is
/// parsed as JSON, falling back to a string), resolves the preset and the defaults of `device`/`attention`/
/// `parallel.comm` (resolve_comm with `host`), and validates (validate_config, its files as `files` says). world_size
/// is used for divisibility checks. Warnings of the resolution are appended to `warnings` when given (main logs them
/// on rank 0). Raises ConfigError naming the key.
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                      bool cuda_available, const HostInfo& host = {}, std::vector<std::string>* warnings = nullptr,
                      FileChecks files = FileChecks::all);

/// Checks the resolved config (shapes, enums, ranges, files readable, output writable, no output naming an input:
/// `config_path` (the config file, "" for none), data.path, init.weights; compared as real paths, so symlinks, hard
/// links and ./ forms count; the files themselves as `files` says). Raises ConfigError.
void validate_config(const RunConfig& c, int world_size, const std::string& config_path = "",
                     FileChecks files = FileChecks::all);

/// The dims a preset sets, by their config names (model.<name>) and ModelCfg members, in one list for every rule
/// that walks them: a preset's fill of the dims left at 0 (resolve), the --set preset's reset (load_config) and
/// changed_from_preset.
struct PresetDim {
  const char* name;
  int ModelCfg::*field;
};
inline constexpr PresetDim kPresetDims[] = {
    {"vocab_size", &ModelCfg::vocab_size}, {"context_length", &ModelCfg::context_length},
    {"d_model", &ModelCfg::d_model},       {"d_ff", &ModelCfg::d_ff},
    {"num_layers", &ModelCfg::num_layers}, {"num_heads", &ModelCfg::num_heads}};

/// The dims of a named preset (kPresetDims); raises ConfigError for unknown names.
ModelCfg preset_model(const std::string& name);

/// The parameters of DESIGN.md's model with dims `m`, counted in double (no padding, no overflow):
/// 2 vocab d_model + num_layers (4 d_model^2 + 3 d_model d_ff + 2 d_model) + d_model.
double model_param_count(const ModelCfg& m);

/// The dims of `m` that differ from its preset's (e.g. a preset run at another context length), as
/// {field: {"preset": value, "used": value}}; empty without a preset. Records and the start line name them, so a
/// record never claims a preset's shape it did not run.
json changed_from_preset(const ModelCfg& m);
std::vector<std::string> preset_names();

/// Whether `precision` computes in bf16 on cuda (bf16 or bf16_pure).
bool bf16_precision(const std::string& precision);
/// Whether `precision` stores weights, gradients and AdamW state in bf16 (bf16_pure).
bool bf16_storage(const std::string& precision);

/// `trainer --help` text: usage, every key with its default and allowed values.
std::string help_text();

}  // namespace trainer
