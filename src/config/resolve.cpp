// Resolution of a read config: the preset's dims and every "auto" / 0 / null-for-auto value (device, attention,
// parallel.comm, name, data.microbatch_size, optimizer.in_backward and in_gemm, gemm_autotune), before validation.
#include <fmt/format.h>

#include <filesystem>

#include "build_info.h"
#include "config/schema.h"
#include "core/errors.h"

namespace trainer {
namespace config_schema {

namespace fs = std::filesystem;

// ---- resolution -----------------------------------------------------------------------------------------------
void resolve(RunConfig& c, const std::string& path, int world_size, bool cuda_available, const HostInfo& host,
             std::vector<std::string>* warnings) {
  if (!c.model.preset.empty()) {
    const ModelCfg p = preset_model(c.model.preset);
    for (const PresetDim& d : kPresetDims)  // the dims left at 0
      if (c.model.*d.field == 0) c.model.*d.field = p.*d.field;
  }
  if (c.device == "auto") c.device = cuda_available ? "cuda" : "cpu";
  if (c.attention == "auto") c.attention = c.device == "cuda" && bf16_precision(c.precision) ? "flash2" : "naive";
  const CommChoice comm = resolve_comm(c.parallel.comm, c.device, host);
  c.parallel.comm = comm.comm;
  if (!comm.warning.empty() && warnings) warnings->push_back(comm.warning);
  if (warnings && c.checkpointing.k != CheckpointingCfg{}.k && c.checkpointing.policy != "every_k")
    warnings->push_back(fmt::format("checkpointing.k = {} has no effect: only policy every_k reads it (policy is '{}')",
                                    c.checkpointing.k, c.checkpointing.policy));
  if (warnings && c.checkpointing.keep_attention && (c.checkpointing.policy == "none" ||
                                                    c.checkpointing.policy == "selective") &&
      (!c.checkpointing.blocks || c.checkpointing.blocks->empty()))
    warnings->push_back(fmt::format("checkpointing.keep_attention has no effect: policy '{}' recomputes no block "
                                    "unless checkpointing.blocks lists some", c.checkpointing.policy));
  // a directory given as "ck/" or "ck//" is "ck" (the log lines and the record then name "ck/step-N", not "ck//step-N")
  for (std::optional<std::string>* dir : {&c.output.checkpoint, &c.init.resume})
    if (*dir)
      while ((*dir)->size() > 1 && (*dir)->back() == '/') (*dir)->pop_back();
  const OptimizerCfg o0;
  if (warnings && c.optimizer.schedule == "constant")
    for (const auto& [set, key] : {std::pair(c.optimizer.warmup_steps != o0.warmup_steps, "warmup_steps"),
                                   std::pair(c.optimizer.cosine_steps != o0.cosine_steps, "cosine_steps"),
                                   std::pair(c.optimizer.min_lr != o0.min_lr, "min_lr")})
      if (set)
        warnings->push_back(fmt::format("optimizer.{} has no effect: schedule 'constant' keeps lr (set "
                                        "optimizer.schedule=cosine for a warm-up and decay)", key));
  // cosine_steps 0 ends the cycle at the run's last step: a warm-up longer than the run never reaches lr (a short
  // trial of a long schedule, which a warning serves better than a refusal)
  const int64_t run_steps = int64_t(c.bench.warmup_steps) + c.bench.measure_steps;
  if (warnings && c.job == "train" && c.optimizer.schedule == "cosine" && c.optimizer.cosine_steps == 0 &&
      c.optimizer.warmup_steps > run_steps)
    warnings->push_back(fmt::format(
        "optimizer.warmup_steps {} exceeds the run's {} steps (bench.warmup_steps + measure_steps), where the cosine "
        "cycle ends with cosine_steps 0: lr stays below optimizer.lr; set optimizer.cosine_steps to the schedule's "
        "full length",
        c.optimizer.warmup_steps, run_steps));
  if (c.name.empty()) c.name = path.empty() ? "default" : fs::path(path).stem().string();
  // optimizer.in_backward null (auto): on wherever it can run (the update needs no global norm; one process owns
  // every unit, or fsdp's rank its shards of it) and a step has an update; it changes no weight and drops the flat
  // gradient buffer (xl bf16: 12.4 GiB of the peak; fsdp: the fp32 accumulator of the shards where a step has one
  // microbatch, the 8B's peak on 2 ranks 13.2 GiB lower)
  if (!c.optimizer.in_backward)
    c.optimizer.in_backward = (c.parallel.strategy == "none" || c.parallel.strategy == "fsdp") &&
                              !c.optimizer.max_grad_norm && c.bench.phase == "train_step";
  // optimizer.in_gemm null (auto): on for cuda bf16 (fp32 state, the fused dW + AdamW kernel's case; a build or GPU
  // without sm_90 runs its fallback, the product into a temporary, then AdamW) where in_backward is on;
  // in_gemm_min_elements keeps it to the products where the kernel wins
  if (!c.optimizer.in_gemm)
    c.optimizer.in_gemm =
        *c.optimizer.in_backward && c.parallel.strategy == "none" && c.device == "cuda" && c.precision == "bf16";
  // gemm_autotune null (auto): on unless the run asks for repeatable bits (a timed choice can differ between runs)
  c.gemm_autotune = gemm_autotune_on(c);
  if (c.data.microbatch_size == 0 && world_size > 0) c.data.microbatch_size = c.data.batch_size / world_size;
}

}  // namespace config_schema

CommChoice resolve_comm(const std::string& comm, const std::string& device, const HostInfo& host) {
  const bool shared = device == "cuda" && host.cuda_devices > 0 && host.local_size > host.cuda_devices;
  const std::string sharing = fmt::format("{} ranks share {} GPU(s) on this host", host.local_size, host.cuda_devices);
  if (comm == "auto") {
    if (device != "cuda") return {"mpi", ""};
    if (!host.nccl)
      return {"mpi", fmt::format("parallel.comm: auto resolves to mpi: {}", build::kNoNcclHint)};
    if (!shared) return {"nccl", ""};
    return {"mpi", fmt::format("parallel.comm: auto resolves to mpi, not nccl: {} (NCCL needs a GPU per rank)",
                               sharing)};
  }
  // (on the cpu, validation's "comm 'nccl' needs device 'cuda'" is the message that helps)
  CONFIG_CHECK(comm != "nccl" || host.nccl || device != "cuda",
               "parallel.comm: 'nccl' is not available: {}; use parallel.comm=mpi",
               build::kNoNcclHint);
  CONFIG_CHECK(comm != "nccl" || !shared,
               "parallel.comm: 'nccl' needs a GPU per rank, but {} (NCCL would fail or hang); use parallel.comm=mpi",
               sharing);
  return {comm, ""};
}

}  // namespace trainer
