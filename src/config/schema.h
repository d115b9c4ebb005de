// The schema of RunConfig, internal to src/config: every key once, in one table per section.
//
// fields(section, f) calls f("key", member, KeyDoc) for every key of the section in documentation order. That one
// table drives to_json and from_json (parse.cpp), the `--set` paths (parse.cpp), the defaults and the `--help` rows
// (help.cpp) and, through the help text, the keys table of configs/README.md (tests/test_config.cpp compares them).
// The allowed-value lists below are the only spelling of each enum's names: validation (validate.cpp) and the help
// text both read them. To add a key, add the member to its struct (config.h), one f(...) line here and its check in
// validate.cpp; to add a job, a strategy or a policy, extend its list here.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <concepts>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "config/config.h"

namespace trainer::config_schema {

using Names = std::vector<std::string_view>;

// ---- allowed values (validation and the help text both read these lists) --------------------------------------
inline const Names kJobs{"train", "attention_bench", "collective_bench"};
inline const Names kDevices{"auto", "cpu", "cuda"};
inline const Names kPrecisions{"fp32", "bf16", "bf16_pure"};
inline const Names kAttention{"auto", "naive", "flash2"};
inline const Names kFp32Matmul{"ieee", "tf32", "3xtf32"};
inline const Names kCheckpointPolicies{"none", "selective", "full", "every_k", "sqrt", "nested"};
inline const Names kStrategies{"none", "ddp_naive", "ddp_flat", "ddp_overlap", "ddp_bucketed", "zero1", "fsdp"};
inline const Names kComms{"auto", "nccl", "mpi"};
inline const Names kReduceDtypes{"fp32", "bf16"};  // the names of `precision`
inline const Names kSchedules{"constant", "cosine"};
inline const Names kSources{"random", "tokens"};
inline const Names kDtypes{"uint16", "uint32"};
inline const Names kSamplings{"random", "sequential"};
inline const Names kPhases{"forward", "forward_backward", "train_step"};
inline const Names kCollectiveOps{"all_reduce", "reduce_scatter", "all_gather"};
inline const Names kCollectiveDtypes{"f32"};
inline const Names kAttnBenchGrids{"a", "b"};
inline const Names kAttnBenchImpls{"naive", "flash2"};

/// The names of the model presets (presets.cpp), as a list like the ones above.
const Names& preset_name_list();

/// "a | b | c".
inline std::string one_of(const Names& names) { return fmt::format("{}", fmt::join(names, " | ")); }

/// The documentation of one key: its allowed values (`text`, where "{}" stands for one_of(*names) when names is
/// set) and its meaning. Sections have an empty KeyDoc.
struct Allowed {
  const char* text = "";
  const Names* names = nullptr;
};
struct KeyDoc {
  Allowed allowed;
  const char* meaning = "";
};
inline std::string allowed_text(const Allowed& a) {
  return a.names ? fmt::format(fmt::runtime(a.text), one_of(*a.names)) : std::string(a.text);
}

// ---- the key lists: fields(section, f) calls f("key", member, KeyDoc) for every key, in documentation order -----
template <class S, class T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

template <Is<ModelCfg> S, class F>
void fields(S& m, F&& f) {
  f("preset", m.preset, {{"\"\" | {}", &preset_name_list()},
    "named model size (table below); fills every model dim left at 0 (given with --set: every dim not also given "
    "with --set). \"\": give all dims explicitly (job train; "
    "the benchmark jobs build no model and need none)"});
  f("vocab_size", m.vocab_size, {{"integer > 0 (0: preset)"}, "vocabulary size; token ids are in [0, vocab_size)"});
  f("context_length", m.context_length, {{"integer > 0 (0: preset)"}, "sequence length T of every row, in tokens"});
  f("d_model", m.d_model, {{"integer > 0 (0: preset)"},
    "residual width; divisible by num_heads, d_model/num_heads even (RoPE)"});
  f("d_ff", m.d_ff, {{"integer > 0 (0: preset)"}, "SwiGLU hidden width (w1, w3: [d_ff, d_model])"});
  f("num_layers", m.num_layers, {{"integer > 0 (0: preset)"}, "Transformer blocks"});
  f("num_heads", m.num_heads, {{"integer > 0 (0: preset)"}, "attention heads; d_head = d_model / num_heads"});
  f("rope_theta", m.rope_theta, {{"number > 0"}, "RoPE base theta"});
}
template <Is<CheckpointingCfg> S, class F>
void fields(S& c, F&& f) {
  f("policy", c.policy, {{"{}", &kCheckpointPolicies},
    "what each block keeps for its backward: none (everything), selective (all but the RMSNorm outputs and the "
    "SwiGLU product, recomputed in backward), full (only its input; the block is recomputed), every_k (one input "
    "per segment of k blocks; the segment is recomputed), sqrt (every_k with k = round(sqrt(num_layers))), nested "
    "(recursive halving: O(log L) inputs kept, O(L log L) block recomputes)"});
  f("k", c.k, {{"integer >= 1"}, "every_k: blocks per recomputed segment"});
  f("blocks", c.blocks, {{"null | array of block indices"},
    "only these blocks are checkpointed (the others keep what selective keeps, or everything under none); full / "
    "none / selective: each listed block is recomputed on its own; every_k / sqrt / nested: consecutive listed "
    "blocks are grouped by the policy. null: every block under full / every_k / sqrt / nested, none under none / "
    "selective"});
  f("lm_head_chunk_tokens", c.lm_head_chunk_tokens, {{"integer >= 0"},
    "tokens per chunk of the fused LM head + cross-entropy (logits, loss and their gradients in one pass); 0: "
    "auto, the largest multiple of 128 (at least 128) whose head buffers (logits, the chunk's normed input, its "
    "gradient, fp32 rstd) take at most 1 GiB"});
  f("keep_attention", c.keep_attention, {{"true | false"},
    "recomputed (checkpointed) blocks also keep attention's output O [N, d_model] and logsumexp from the forward, "
    "so their recompute runs the GEMMs but not the attention forward (at long context about half of a block's "
    "forward) for N x d_model activations more per checkpointed block (naive attention: also its [heads, T, T] "
    "probabilities, which rarely pays); changes no number"});
}
template <Is<ParallelCfg> S, class F>
void fields(S& p, F&& f) {
  f("strategy", p.strategy, {{"{}", &kStrategies},
    "how gradients (and optimizer state) are shared between ranks; fsdp also shards the weights (each rank keeps "
    "1/N of every unit, all-gathered before use)"});
  f("comm", p.comm, {{"{}", &kComms},
    "communicator; auto: nccl on cuda with a GPU per rank (in a build with NCCL), else mpi"});
  f("bucket_mb", p.bucket_mb, {{"number > 0, <= 2^36"}, "ddp_bucketed bucket size, MiB of fp32 gradients"});
  f("reduce_dtype", p.reduce_dtype, {{"{}", &kReduceDtypes},
    "ddp_*: dtype of the gradients summed over ranks; bf16 halves the bytes (needs comm nccl)"});
  f("prefetch_layers", p.prefetch_layers, {{"integer >= 0"},
    "fsdp: units (embedding, blocks, head) whose weight shards are all-gathered ahead of their use, at most a "
    "microbatch's gathers (training: 2 x layers + 2, more where a recomputed segment spans several blocks; "
    "bench.phase forward: layers + 2); gather buffers in up to two size classes, as many of each as "
    "prefetch_layers + 1 gathers in a row of the run's schedule hold"});
  f("comm_timeout_s", p.comm_timeout_s, {{"number >= 1, <= 1e7"},
    "a collective not done after this many seconds aborts every rank (waits on a checkpoint's writes and reads: "
    "checkpoint_timeout_s, where longer)"});
  f("startup_timeout_s", p.startup_timeout_s, {{"number >= 1, <= 1e7"},
    "a rank that has not finished loading its config (and checking its data) this many seconds after the first "
    "rank ends the job with a message"});
  f("checkpoint_timeout_s", p.checkpoint_timeout_s, {{"number >= 1, <= 1e7"},
    "how long the ranks wait for each other while a checkpoint is written (rank 0 writes the weights alone) or "
    "read (init.resume, init.weights: each rank reads the weights), if longer than comm_timeout_s: a rank not done "
    "by then aborts every rank; raise it for slow storage"});
}
template <Is<OptimizerCfg> S, class F>
void fields(S& o, F&& f) {
  f("lr", o.lr, {{"number >= 0"},
    "peak learning rate of AdamW. The update (src/backend/adamw_step.h), t = 1, 2, ...: p -= lr*wd*p; m = b1 m + "
    "(1-b1) g; v = b2 v + (1-b2) g^2; p -= lr sqrt(1-b2^t) / (1-b1^t) * m / (sqrt(v) + eps). eps is added as in the"
    " handout's Algorithm 1 (torch.optim.AdamW adds it to sqrt(v / (1-b2^t)): the same update up to eps's size); "
    "the decay comes first, as in torch (the handout decays after the step)"});
  f("betas", o.betas, {{"[beta1, beta2], each in [0, 1)"}, "AdamW moment decay rates"});
  f("eps", o.eps, {{"number > 0"}, "AdamW denominator epsilon, added to sqrt(v) (see lr)"});
  f("weight_decay", o.weight_decay, {{"number >= 0"},
    "decoupled weight decay (p -= lr*wd*p), applied to every parameter"});
  f("max_grad_norm", o.max_grad_norm, {{"null | number > 0"},
    "clip the global gradient L2 norm n to this: every gradient times min(1, max_grad_norm / (n + 1e-6)), as "
    "torch.nn.utils.clip_grad_norm_; the record's grad_norm is n, before clipping; null: no clipping. Ignored, "
    "with a warning, where bench.phase takes no optimizer step"});
  f("in_backward", o.in_backward, {{"null | true | false"},
    "AdamW updates each unit (embedding, block, head) as soon as its gradient is final, during the backward; each "
    "unit's gradient then exists only from its backward to its update, so no flat gradient buffer (strategy none; "
    "fsdp: each unit's shards once its reduce_scatter lands, and no gradient accumulator where a step has one "
    "microbatch; no clipping; changes no weight). null (auto): true for a train_step run of strategy none or fsdp "
    "without clipping, else false"});
  f("in_gemm", o.in_gemm, {{"null | true | false"},
    "with in_backward (a train_step run, strategy none): the weight matrices of the blocks and the LM head whose gradient product "
    "[M, N] has at least in_gemm_min_elements elements are updated inside that product on the step's last "
    "microbatch (adding the earlier microbatches' sum; the head's in its last chunk); with one microbatch their "
    "gradients never exist. On an sm_90 GPU with precision bf16 (no stochastic rounding) one fused kernel "
    "(kernels/dw_adamw) takes dW = dYᵀX from the GEMM's accumulators straight into AdamW; elsewhere the product goes "
    "to a one-matrix temporary (or the earlier sum), then AdamW. The same update up to the product's summation order. "
    "null (auto): true for strategy none, device cuda, precision bf16 and in_backward on, else false. On an H100 (v31, every matrix) "
    "xl bf16 ran 5% faster with it (98.9-100.3 against 104.8-105.6 ms a step), small bf16 13% slower (6.30-6.41 "
    "against 5.57-5.60), hence the size bound; at the bound (v32, H100) xl 98.5-100.1 against 104.0-104.6 ms, "
    "small 5.58 against 5.56-5.57; kernels/dw_adamw/NOTES.md"});
  f("in_gemm_min_elements", o.in_gemm_min_elements, {{"integer >= 0"},
    "in_gemm: the smallest weight-gradient product (M N elements; q, k, v are one product, w1 and w3 one) updated "
    "inside its product; smaller ones take the product, then AdamW (the fused kernel loses on them: on an H100 xl's "
    "6.6M-element output projection ties, small's 4.7M-element [w1; w3] is 10% slower). 0: every matrix. At the "
    "default, xl fuses Wqkv, [w1; w3], w2 and the LM head, small nothing (its largest product, the head's, has "
    "7.7M elements)"});
  f("stochastic_rounding", o.stochastic_rounding, {{"true | false"},
    "bf16_pure: round each updated weight up or down at random in proportion (unbiased; deterministic in "
    "init.seed, the step and the element) instead of to nearest; m and v are rounded to nearest"});
  f("schedule", o.schedule, {{"{}", &kSchedules},
    "constant: lr at every step (warmup_steps, cosine_steps and min_lr unused); cosine: the handout's "
    "get_lr_cosine_schedule at step index t = 0, 1, ...: lr t / warmup_steps while t < warmup_steps (the first step's "
    "lr is 0 with a warm-up), min_lr + (lr - min_lr)(1 + cos(pi (t - warmup_steps) / (cosine_steps - "
    "warmup_steps))) / 2 up to t = cosine_steps, min_lr after"});
  f("warmup_steps", o.warmup_steps, {{"integer >= 0"},
    "warm-up iterations of the schedule (cosine; with cosine_steps 0, a warm-up longer than the run never reaches "
    "lr: a warning says so)"});
  f("cosine_steps", o.cosine_steps, {{"integer >= 0 (>= warmup_steps)"},
    "end of the cosine cycle; 0: the run's total steps (bench.warmup_steps + measure_steps; the last step's index is "
    "one less, so min_lr is not reached)"});
  f("min_lr", o.min_lr, {{"number >= 0"}, "learning rate after the cosine cycle"});
}
template <Is<DataCfg> S, class F>
void fields(S& d, F&& f) {
  f("source", d.source, {{"{}", &kSources}, "random: seeded uniform token ids; tokens: a flat binary token file"});
  f("path", d.path, {{"null | file path"},
    "token file (needed for source tokens): ids < vocab_size, >= context_length+1 tokens"});
  f("dtype", d.dtype, {{"{}", &kDtypes}, "element type of the token file (little-endian)"});
  f("sampling", d.sampling, {{"{}", &kSamplings},
    "random: row i of step s starts at a uniform offset in [0, n - T - 1] of the file's n tokens (T = "
    "context_length; drawn from data.seed, s and i: rows independent, with replacement, the same whatever the number "
    "of ranks; targets are the inputs shifted by one, as the handout's get_batch); sequential: row i of step s starts "
    "at ((s*rows + i) * T) mod (n - T)"});
  f("batch_size", d.batch_size, {{"integer > 0, divisible by the world size"},
    "global batch in rows of context_length tokens"});
  f("microbatch_size", d.microbatch_size, {{"integer >= 0, divides the per-rank batch"},
    "rows per forward/backward on one rank (gradient accumulation); 0: the whole per-rank batch"});
  f("seed", d.seed, {{"integer >= 0"}, "seed of the random tokens and of random sampling"});
}
template <Is<BenchCfg> S, class F>
void fields(S& b, F&& f) {
  f("phase", b.phase, {{"{}", &kPhases},
    "what each timed step runs. forward: inference (no gradient buffer, no AdamW state, a block's activations freed "
    "once its output exists); forward_backward: no AdamW state; train_step: the whole step. fsdp keeps its "
    "gradient shard (1/N of the fp32 gradients) in forward_backward and train_step, none in forward"});
  f("warmup_steps", b.warmup_steps, {{"integer >= 0"},
    "steps before timing starts (they train too); attention_bench: untimed calls a point"});
  f("measure_steps", b.measure_steps, {{"integer >= 0 (warmup + measure >= 1)"},
    "timed steps; attention_bench: timed calls a point (>= 1)"});
  f("log_every", b.log_every, {{"integer >= 0"}, "progress line every N steps; 0: none"});
}
template <Is<InitCfg> S, class F>
void fields(S& i, F&& f) {
  f("weights", i.weights, {{"null | readable file"},
    "safetensors file to start from: the model's parameters by reference name and nothing else, each at its shape "
    "(F32, F64 or BF16; checked from its header before the run starts), finite (in bf16 too under bf16_pure); "
    "every rank reads it, and the ranks' copies must agree (size and CRC-32); null: random init with init.seed"});
  f("resume", i.resume, {{"null | checkpoint directory"},
    "continue the run saved in this output.checkpoint directory (its 'latest' checkpoint, read once with the "
    "config, every rank the same one, or a step-N directory inside it): weights, AdamW state, step, learning-rate "
    "schedule and data position; bench.warmup_steps + "
    "measure_steps is the whole run's length, counted from step 0; any strategy and world size; not with "
    "init.weights"});
  f("seed", i.seed, {{"integer >= 0"}, "seed of the random initialisation"});
}
template <Is<OutputCfg> S, class F>
void fields(S& o, F&& f) {
  f("results", o.results, {{"null | writable path"},
    "result record; null: results/runs/{name}-{YYYYmmdd-HHMMSS}-{pid}.json"});
  f("checkpoint", o.checkpoint, {{"null | writable directory"},
    "training checkpoint directory, written at the end (and every checkpoint_every steps): weights "
    "(DIR/model.safetensors, for init.weights), AdamW state per rank, step and config, for init.resume, with each "
    "file's size and CRC-32 (checked by the resume); crash-safe (the previous checkpoint stays until the new one is "
    "complete); it may be init.resume's directory; null: none"});
  f("checkpoint_every", o.checkpoint_every, {{"integer >= 0"},
    "also write output.checkpoint every N steps; 0: only at the end"});
}
template <Is<ProfileCfg> S, class F>
void fields(S& p, F&& f) {
  f("nvtx", p.nvtx, {{"true | false"}, "NVTX ranges around layers and phases (for Nsight Systems)"});
  f("trace", p.trace, {{"null | writable path"},
    "Chrome trace (chrome://tracing, Perfetto) of the measured steps of job train: phases, blocks, ops and "
    "collectives on the GPU timeline; one file for all ranks, written at the end of the run, or at a loss that is "
    "not finite (the steps up to it); a run that fails otherwise (out of memory, an error) writes none and says so"});
  f("memory_timeline", p.memory_timeline, {{"null | writable path"},
    "job train: every allocation and free (bytes, category, phase, block, time) as JSON for launch/plot_memory.py; "
    "rank r > 0 writes PATH with .rank<r> before the extension"});
}
template <Is<CollectiveCfg> S, class F>
void fields(S& c, F&& f) {
  f("ops", c.ops, {{"non-empty array of {}", &kCollectiveOps}, "collective_bench: collectives to time"});
  f("sizes_mb", c.sizes_mb, {{"non-empty array of numbers > 0, each <= 2^36"},
    "collective_bench: MiB of the whole array (nccl-tests size; reduce_scatter input, all_gather output); at most "
    "2^36 MiB = 2^56 bytes, the bound of the trainer's 64-bit sizes"});
  f("warmup", c.warmup, {{"integer >= 0"}, "collective_bench: untimed operations per size"});
  f("iters", c.iters, {{"integer >= 1"}, "collective_bench: timed operations per size (time = their mean)"});
  f("dtype", c.dtype, {{"{}", &kCollectiveDtypes}, "collective_bench: element type"});
}
template <Is<AttentionBenchCfg> S, class F>
void fields(S& c, F&& f) {
  f("grids", c.grids, {{"non-empty array of {}", &kAttnBenchGrids},
    "attention_bench: CS336 a2's grids: a = batch 8, 1 head, no mask, d_head 16-128, seq 256-16384, in the run's "
    "precision; b = batch 1, 1 head, causal, d_head 16-128, seq 128 to max_seq by doubling, bf16 (cuda) and fp32. "
    "Each point runs bench.warmup_steps untimed and bench.measure_steps (>= 1) timed forward, backward and "
    "forward + backward calls (their median)"});
  f("impls", c.impls, {{"non-empty array of {}", &kAttnBenchImpls},
    "attention_bench: the implementations compared (naive materialises the [seq, seq] scores)"});
  f("max_seq", c.max_seq, {{"integer, 128 .. 1048576"},
    "attention_bench: the longest sequence of either grid (points above it are not run); on the cpu a point that "
    "needs more than the host's available memory is an oom row without running"});
}
template <Is<RunConfig> S, class F>
void fields(S& c, F&& f) {
  f("job", c.job, {{"{}", &kJobs},
    "what to run: train (training loop / step benchmark), attention_bench (naive vs flash2 attention grids of "
    "CS336 a2) or collective_bench (collective bandwidth table)"});
  f("name", c.name, {{"string"},
    "run name, used in default output names; \"\": the config file's stem (\"default\" for the embedded config)"});
  f("model", c.model, KeyDoc{});
  f("device", c.device, {{"{}", &kDevices},
    "auto: cuda when a GPU is visible, else cpu (the fp32 reference backend)"});
  f("precision", c.precision, {{"{}", &kPrecisions},
    "bf16: fp32 master weights, grads and optimizer state, bf16 matmuls and activations (cuda only); bf16_pure: "
    "weights, grads and AdamW m, v stored in bf16 as the leaderboard's reference model has them (AdamW computed in "
    "fp32, rounded once; activations bf16 on cuda, fp32 on the cpu backend, which emulates the bf16 storage; "
    "parallel.strategy none only)"});
  f("fp32_matmul", c.fp32_matmul, {{"{}", &kFp32Matmul},
    "fp32 matrix products on cuda (ignored on cpu; replaces allow_tf32): ieee: CUDA cores, IEEE fp32; tf32: one TF32 "
    "tensor-core product (10-bit mantissas, ~1e-3 relative error; naive attention's products too); 3xtf32: the "
    "model's GEMMs as three TF32 products of operands split into high and low parts (fp32-order error, about 2x "
    "the ieee GEMM rate on an H200; a workspace holds the split operands of the largest product; naive attention's "
    "products stay IEEE)"});
  f("gemm_autotune", c.gemm_autotune, {{"null | true | false"},
    "cuda: on the first call of each GEMM shape, time cuBLASLt's candidate algorithms and keep the fastest (which "
    "one wins can differ between runs); null (auto): true unless deterministic"});
  f("deterministic", c.deterministic, {{"true | false"},
    "cuda: two runs of one config on one GPU type give the same bits (losses, weights): the flash attention "
    "backward adds dQ in a fixed order instead of with fp32 atomic adds in any order (the Hopper kernels: each dQ "
    "tile's contributions in key-tile order; the mma.sync kernels: a dQ pass of its own), and gemm_autotune null "
    "(auto) is off (cuBLASLt's heuristic algorithm, not a timed choice; an explicit gemm_autotune true is "
    "refused). false: GPU runs with flash2 differ from the first update on in the last bits (the loss's ~6th "
    "digit). The mode costs 0-3% of a step on an H100 (v48, see the README). The cpu backend repeats at one "
    "OpenBLAS thread count either way. Several GPUs add NCCL's reductions, whose repeatability this was not checked "
    "for"});
  f("attention", c.attention, {{"{}", &kAttention},
    "auto: flash2 for bf16 on cuda, else naive (materialised scores)"});
  f("cuda_graph", c.cuda_graph, {{"true | false"},
    "true: the train job captures its second step in a CUDA graph and replays it for every later step (the same "
    "kernels and arguments: exact; saves the launch time of every op) where it can: device cuda, strategy none, no "
    "profile.trace or profile.nvtx, at least 2 steps in this run; elsewhere the steps run uncaptured and the log "
    "and the record's cuda_graph.why_not say why. A run with a graph is timed by whole steps (no forward / "
    "backward / optimizer split)"});
  f("checkpointing", c.checkpointing, KeyDoc{});
  f("parallel", c.parallel, KeyDoc{});
  f("optimizer", c.optimizer, KeyDoc{});
  f("data", c.data, KeyDoc{});
  f("bench", c.bench, KeyDoc{});
  f("init", c.init, KeyDoc{});
  f("output", c.output, KeyDoc{});
  f("profile", c.profile, KeyDoc{});
  f("collective", c.collective, KeyDoc{});
  f("attention_bench", c.attention_bench, KeyDoc{});
}

/// A section is a struct with a key list (it serialises as a JSON object).
template <class T>
concept Section = requires(T& t) { fields(t, [](const char*, auto&, const KeyDoc&) {}); };

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

/// A value as JSON: sections as objects, std::optional as null when empty.
template <class T>
json to_value(const T& v) {
  if constexpr (Section<T>) {
    json j = json::object();
    fields(v, [&](const char* name, const auto& member, const KeyDoc&) { j[name] = to_value(member); });
    return j;
  } else if constexpr (is_optional<T>::value) {
    return v ? to_value(*v) : json(nullptr);
  } else {
    return json(v);
  }
}

// ---- the steps of load_config (config.cpp), one file each --------------------------------------------------------
/// parse.cpp: the whole file as bytes. ConfigError "config: cannot read 'X': <strerror>".
std::string read_text_file(const std::string& path);
/// parse.cpp: config text (comments allowed) as JSON; ConfigError for invalid JSON, a key given twice in one object,
/// and a number that underflows to 0. `origin` names the text in messages.
json parse_config_text(const std::string& text, const std::string& origin);
/// parse.cpp: applies one `--set key.path=value` to `full` (the complete config as JSON). ConfigError naming the key.
void apply_override(json& full, const std::string& text);
/// resolve.cpp: fills the preset's dims and the "auto" / 0 values (device, attention, parallel.comm, name,
/// data.microbatch_size); `path` is the config file ("" for the embedded one). Warnings go to `warnings`.
void resolve(RunConfig& c, const std::string& path, int world_size, bool cuda_available, const HostInfo& host,
             std::vector<std::string>* warnings);

}  // namespace trainer::config_schema
