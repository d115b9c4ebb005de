#include "plan/planner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dist/meta_communicator.h"
#include "io/checkpoint.h"
#include "jobs/job.h"
#include "jobs/train_setup.h"
#include "jobs/train_step.h"
#include "optim/schedule.h"

namespace trainer {

namespace {

/// Silences the default logger for its lifetime (the dry run's strategies log their set-up as a run does).
class QuietLog {
 public:
  QuietLog() : logger_(spdlog::default_logger()), level_(logger_ ? logger_->level() : spdlog::level::info) {
    if (logger_) logger_->set_level(spdlog::level::off);
  }
  ~QuietLog() {
    if (logger_) logger_->set_level(level_);
  }
  QuietLog(const QuietLog&) = delete;
  QuietLog& operator=(const QuietLog&) = delete;

 private:
  std::shared_ptr<spdlog::logger> logger_;
  spdlog::level::level_enum level_;
};

nlohmann::json categories_json(const std::array<size_t, kNumCategories>& a) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumCategories; ++i) j[category_name(Category(i))] = a[size_t(i)];
  return j;
}

}  // namespace

std::string format_seconds(double s, int decimals) {
  return s >= 1      ? fmt::format("{:.{}f} s", s, decimals)
         : s >= 1e-4 ? fmt::format("{:.{}f} ms", s * 1e3, decimals)
         : s > 0     ? fmt::format("{:.{}f} us", s * 1e6, decimals)
                     : std::string("0 ms");
}

Plan make_plan(const RunConfig& cfg, int world_size, int rank, const std::string& gpu) {
  CONFIG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "plan: rank {} of world size {}", rank,
               world_size);
  CONFIG_CHECK(cfg.job == "train", "plan: only job 'train' has a plan (job is '{}')", cfg.job);
  const GpuSpec& spec = gpu_spec(gpu);  // a known name, whatever the device
  const Device dev = cfg.device == "cuda" ? Device::cuda : Device::cpu;
  Plan p;
  p.world_size = world_size;
  p.rank = rank;
  p.device = cfg.device;
  p.deterministic = cfg.deterministic && dev == Device::cuda;
  p.strategy = cfg.parallel.strategy;
  p.comm = cfg.parallel.comm;
  p.bus_bandwidth = MetaCommunicator::default_bus_bandwidth(p.comm);
  p.device_memory_bytes = dev == Device::cuda ? spec.memory_bytes : 0;

  QuietLog quiet;
  MetaBackend be(dev, backend_options(cfg), gpu);
  MetaCommunicator comm(rank, world_size, p.comm, p.bus_bandwidth, &be);
  TrainSetup s = setup_training(cfg, be, &comm, world_size, /*init_weights=*/false);
  p.tokens_per_step = s.shape.global_tokens;
  p.rank_tokens_per_step = s.rank_tokens;
  {  // the block's saved tensors at the run's microbatch, from the one table the model carves its store from
    const ModelDims& d = s.dims;
    const ActivationPolicy& pol = s.model->policy();
    for (const SavedTensorSpec& t :
         block_saved_tensors(d.d_model, d.d_ff, d.num_heads, s.model->act_dtype(),
                             s.model->attention() == AttnImpl::naive, s.shape.micro, s.shape.seq_len)) {
      SavedTensorRow r;
      r.name = t.name;
      r.kind = saved_kind_name(t.kind);
      r.dtype = dtype_name(t.dtype);
      r.shape.assign(t.shape.begin(), t.shape.begin() + t.ndim);
      r.bytes = t.bytes();
      r.stored = pol.stored_keeps(t);
      r.checkpointed = pol.recomputed_keeps(t);
      p.block_store.push_back(std::move(r));
    }
  }
  // Steps as the train job runs them (jobs/train.cpp): the step's losses and tokens, then train_step.
  s.model->begin_step_losses(s.rank_tokens);
  p.setup_bytes = be.memory().total;
  const auto setup_high = be.phase_high_water();  // "setup" before the step (outside the step's phases it reads so too)
  be.reset_cost();
  comm.reset_cost();
  // The step's token ids: MetaBackend's copy_from_host reads nothing, so no host batch (rank_tokens ids: 16 GB at a
  // context of 1e9) is made for it
  const int32_t no_tokens[1] = {0};
  s.model->set_step_tokens(no_tokens, no_tokens);
  train_step(be, *s.model, *s.strategy, s.shape, learning_rate(cfg.optimizer, 0, 1), cfg.optimizer.max_grad_norm);
  s.model->step_loss_sum();
  const MetaCost c = be.cost();  // the work of one step
  const double comm_s = comm.seconds(), comm_bytes = comm.bytes();
  // exposed: what the compute stream waited for collectives, and the last one's tail past the stream's end (one still
  // in flight delays the next step); at most the collectives' time (rounding aside)
  double exposed = std::min(comm_s, c.comm_wait_s + std::max(0.0, comm.free_at() - be.now()));
  if (comm_s - exposed <= 1e-9 * comm_s) exposed = comm_s;  // synchronous collectives: rounding is not overlap
  const int64_t collectives = comm.collectives();
  // A second step for the memory where the run has one: buffers a strategy makes lazily during the first step after
  // its peak (fsdp's shard temporaries for later microbatches) stay for the run and count in every later step's peak.
  int64_t steps = int64_t(cfg.bench.warmup_steps) + cfg.bench.measure_steps;
  if (cfg.init.resume) try {  // the steps left after the checkpoint's (check_resume has vetted it)
      steps -= read_checkpoint_manifest(resume_step_dir(cfg)).value("step", int64_t(0));
    } catch (const std::exception&) {  // unreadable here: plan the longer run
    }
  if (steps >= 2) {
    s.model->begin_step_losses(s.rank_tokens);
    s.model->set_step_tokens(no_tokens, no_tokens);
    train_step(be, *s.model, *s.strategy, s.shape, learning_rate(cfg.optimizer, 1, 2), cfg.optimizer.max_grad_norm);
    s.model->step_loss_sum();
  }
  if (cfg.output.checkpoint) {  // a checkpoint's reads of the weights (TrainCheckpointer::write): fsdp's gather buffer
    const ScopedRange phase(be, "checkpoint", "phase");
    s.strategy->gather_params();
    for (const ParamInfo& q : s.model->layout().params()) (void)s.strategy->gathered_param(q);
  }

  const MemoryStats& ms = be.memory();
  p.peak_bytes = ms.peak_total;
  p.by_category = ms.at_peak;
  p.category_peaks = ms.peak;
  p.peak_phase = ms.peak_phase ? ms.peak_phase : "setup";
  if (ms.peak_block_name)
    p.peak_block = ms.peak_block >= 0 ? fmt::format("{} {}", ms.peak_block_name, ms.peak_block) : ms.peak_block_name;
  p.phase_high_water = be.phase_high_water();
  p.phase_high_water["setup"] = setup_high.count("setup") ? setup_high.at("setup") : 0;
  p.flops = c.flops;
  p.executed_flops = c.executed_flops;
  p.bytes_moved = c.bytes;
  p.compute_s = c.compute_s;
  p.memory_s = c.memory_s;
  p.comm_s = comm_s;
  p.comm_exposed_s = exposed;
  // what the collectives that ran under the ops took from them (MetaCommunicator::overlap_slowdown)
  p.overlap_slowdown_s = comm.overlap_slowdown() * std::max(0.0, p.comm_s - p.comm_exposed_s);
  p.comm_bytes = comm_bytes;
  p.collectives = collectives;
  p.comm_latency = comm.latency();
  p.comm_overlap_slowdown = comm.overlap_slowdown();
  p.time_s = p.compute_s + p.memory_s + p.comm_exposed_s + p.overlap_slowdown_s;
  p.rates = be.rates();
  return p;
}

nlohmann::json Plan::predicted_json() const {
  return {{"peak_bytes", peak_bytes},
          {"by_category", categories_json(by_category)},
          {"peak_phase", peak_phase},
          {"peak_block", peak_block.empty() ? nlohmann::json(nullptr) : nlohmann::json(peak_block)}};
}

nlohmann::json Plan::to_json() const {
  using nlohmann::json;
  json mem = predicted_json();
  mem["category_peaks"] = categories_json(category_peaks);
  mem["setup_bytes"] = setup_bytes;
  json hw = json::object();
  for (const auto& [k, v] : phase_high_water) hw[k] = v;
  mem["phase_high_water"] = hw;
  mem["device_memory_bytes"] = device_memory_bytes ? json(device_memory_bytes) : json(nullptr);
  mem["fits"] = device_memory_bytes ? json(peak_bytes <= device_memory_bytes) : json(nullptr);
  // within the kFitFraction --fit keeps (the text's "fits, but above the 93% ..." when false and fits is true)
  mem["fits_with_headroom"] =
      device_memory_bytes ? json(double(peak_bytes) <= kFitFraction * double(device_memory_bytes)) : json(nullptr);
  json store = json::array();
  for (const SavedTensorRow& r : block_store)
    store.push_back({{"name", r.name}, {"kind", r.kind}, {"dtype", r.dtype}, {"shape", r.shape}, {"bytes", r.bytes},
                     {"stored", r.stored}, {"checkpointed", r.checkpointed}});
  mem["block_store"] = store;
  return {{"world_size", world_size},
          {"rank", rank},
          {"device", device},
          {"strategy", strategy},
          {"comm", comm},
          {"tokens_per_step", tokens_per_step},
          {"rank_tokens_per_step", rank_tokens_per_step},
          {"memory", mem},
          {"flops", flops},
          {"executed_flops", executed_flops},
          {"bytes_moved", bytes_moved},
          {"time_s", time_s},
          {"time",
           {{"compute_s", compute_s}, {"memory_s", memory_s}, {"comm_s", comm_s}, {"comm_exposed_s", comm_exposed_s},
            {"overlap_slowdown_s", overlap_slowdown_s}}},
          {"comm_bytes", comm_bytes},
          {"collectives", collectives},
          {"assumptions",
           {{"device", rates.device},
            {"gemm_bf16_flops_per_s", rates.gemm_bf16},
            {"gemm_f32_flops_per_s", rates.gemm_f32},
            {"fp32_matmul", rates.gemm_f32_mode},
            {"gemm_efficiency", rates.gemm_efficiency},
            {"dw_adamw_gemm_flops_per_s", rates.dw_adamw_gemm},
            {"dw_adamw_epilogue_exposed", rates.dw_adamw_epilogue_exposed},
            {"attention_bf16_flops_per_s", rates.attention_bf16},
            {"attention_bf16_sm90_fwd_flops_per_s", rates.attention_bf16_fwd_sm90},
            {"attention_bf16_sm90_bwd_flops_per_s", rates.attention_bf16_bwd_sm90},
            {"attention_bf16_sm90_bwd_d128_flops_per_s", rates.attention_bf16_bwd_sm90_d128},
            {"attention_sm90_rate_seq_len", rates.sm90_rate_seq_len},
            {"attention_sm90_fwd_t0", rates.attention_sm90_fwd_t0},
            {"attention_sm90_bwd_t0", rates.attention_sm90_bwd_t0},
            {"deterministic", deterministic},
            {"attention_det_bwd_t0", rates.attention_det_bwd_t0},
            {"attention_det_bwd_sm90_time_factor", rates.attention_det_bwd_sm90},
            {"attention_f32_flops_per_s", rates.attention_f32},
            {"memory_bandwidth_bytes_per_s", rates.memory_bandwidth},
            {"comm_bus_bandwidth_bytes_per_s", bus_bandwidth},
            {"comm_latency_s", comm_latency},
            {"comm_overlap_slowdown", comm_overlap_slowdown},
            {"source", rates.source},
            {"method",
             "a dry run of the train job's set-up, its first two train_steps (one where the run has one) and, "
             "with output.checkpoint, a checkpoint's reads of the weights, on the meta backend: memory is what it "
             "allocated (cuda: with the CUDA backend's workspace); time is the first step's: each op takes "
             "max(FLOPs / rate, bytes / bandwidth); a collective latency + bytes / bus bandwidth, on a stream of "
             "its own beside the ops (nccl: an asynchronous one runs under the ops issued until its wait; mpi: "
             "none overlaps); the step ends when both streams have, plus comm_overlap_slowdown of the time "
             "collectives ran under the ops"}}}};
}

std::string Plan::summary_line() const {
  std::string cats;
  for (int i = 0; i < kNumCategories; ++i) {
    if (!by_category[size_t(i)]) continue;
    cats += fmt::format("{}{} {}", cats.empty() ? "" : ", ", category_name(Category(i)),
                        format_bytes(by_category[size_t(i)]));
  }
  return fmt::format("plan (rank {} of {}, {}): peak {} in {}{} ({}); step {} predicted ({} compute, {} memory{}; "
                     "{:.3g} TFLOP)",
                     rank, world_size, rates.device, format_bytes(peak_bytes), peak_phase,
                     peak_block.empty() ? "" : " / " + peak_block, cats, format_seconds(time_s),
                     format_seconds(compute_s), format_seconds(memory_s),
                     !collectives ? ""
                     : fmt::format(", {} comm exposed of {}{}", format_seconds(comm_exposed_s), format_seconds(comm_s),
                                   overlap_slowdown_s > 0
                                       ? fmt::format(", {} slowed", format_seconds(overlap_slowdown_s))
                                       : ""),
                     flops / 1e12);
}

std::string Plan::table() const {
  std::string t = fmt::format("plan for rank {} of {} on {} (strategy {}, comm {}), {} tokens per step\n", rank,
                              world_size, rates.device, strategy, comm, tokens_per_step);
  t += "memory at the peak             bytes          own peak\n";
  for (int i = 0; i < kNumCategories; ++i)
    t += fmt::format("  {:<20} {:>16} {:>16}\n", category_name(Category(i)), format_bytes(by_category[size_t(i)]),
                     format_bytes(category_peaks[size_t(i)]));
  t += fmt::format("  {:<20} {:>16}   in phase {}{}\n", "peak", format_bytes(peak_bytes), peak_phase,
                   peak_block.empty() ? "" : ", " + peak_block);
  if (device_memory_bytes)
    t += fmt::format("  {:<20} {:>16}   {}\n", "device memory", format_bytes(device_memory_bytes),
                     peak_bytes > device_memory_bytes                              ? "DOES NOT FIT"
                     : double(peak_bytes) <= kFitFraction * double(device_memory_bytes) ? "fits"
                         : fmt::format("fits, but above the {:.0f}% --fit keeps (the CUDA context, cuBLAS and NCCL "
                                       "need the rest)", 100 * kFitFraction));
  t += fmt::format("  {:<20} {:>16}\n", "after set-up", format_bytes(setup_bytes));
  t += "high-water mark by phase\n";
  for (const auto& [k, v] : phase_high_water) t += fmt::format("  {:<20} {:>16}\n", k, format_bytes(v));
  if (!block_store.empty()) {  // largest first, as the handout's "top saved tensors" question asks
    std::vector<const SavedTensorRow*> rows;
    for (const SavedTensorRow& r : block_store) rows.push_back(&r);
    std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
    std::string kept, recomputed, aside;
    size_t kept_bytes = 0, aside_bytes = 0;
    for (const SavedTensorRow* r : rows) {
      const std::string item = fmt::format("{} {}", r->name, format_bytes(r->bytes));
      (r->stored ? kept : recomputed) += (r->stored ? kept : recomputed).empty() ? item : ", " + item;
      if (r->stored) kept_bytes += r->bytes;
      if (r->checkpointed) {
        aside += aside.empty() ? r->name : " + " + r->name;
        aside_bytes += r->bytes;
      }
    }
    t += fmt::format("a block's saved tensors (a microbatch): a stored block keeps {} ({}){}; a recomputed block "
                     "keeps {} ({})\n",
                     format_bytes(kept_bytes), kept,
                     recomputed.empty() ? "" : fmt::format("; recomputed in its backward: {}", recomputed),
                     format_bytes(aside_bytes), aside);
  }
  t += fmt::format("work per step{}: {:.4g} TFLOP (the ops' dense count, recompute included; the record's "
                   "flops_per_token counts none; {:.4g} executed, causal attention halved), {:.4g} GB moved, {} "
                   "sent in collectives\n",
                   world_size > 1 ? fmt::format(" of this rank ({} of the {} tokens)", rank_tokens_per_step,
                                                tokens_per_step)
                                  : "",
                   flops / 1e12, executed_flops / 1e12, bytes_moved / 1e9, format_bytes(size_t(comm_bytes)));
  const double hidden = std::max(0.0, comm_s - comm_exposed_s);
  t += fmt::format("predicted step: {} = {} compute + {} memory-bound{}{} (ops in sequence, each at the slower of its "
                   "FLOPs and bytes)\n",
                   format_seconds(time_s), format_seconds(compute_s), format_seconds(memory_s),
                   collectives ? fmt::format(" + {} communication exposed", format_seconds(comm_exposed_s)) : "",
                   overlap_slowdown_s > 0 ? fmt::format(" + {} by which collectives running under the ops slow them",
                                                        format_seconds(overlap_slowdown_s))
                                          : "");
  if (collectives)
    t += fmt::format("collectives: {} taking {} ({} at {:.4g} GB/s bus bandwidth, {:.3g} us each to start), {} of it "
                     "under the ops{}\n",
                     collectives, format_seconds(comm_s), format_bytes(size_t(comm_bytes)), bus_bandwidth / 1e9,
                     comm_latency * 1e6, format_seconds(hidden),
                     comm != "nccl" ? " (mpi: none overlaps)"
                     : hidden > 0   ? fmt::format(" (asynchronous ones, on NCCL's stream; they slow the ops by {:.2g} "
                                                  "of that)", comm_overlap_slowdown)
                                    : "");
  if (device == "cpu") {  // the cpu's nominal rates: no bf16, no Hopper kernels
    t += fmt::format("assumed rates ({}): GEMM fp32 {:.4g} TFLOP/s, attention {:.4g} TFLOP/s, memory {:.4g} TB/s, "
                     "collectives {:.4g} GB/s bus bandwidth\n",
                     rates.device, rates.gemm_f32 / 1e12, rates.attention_f32 / 1e12, rates.memory_bandwidth / 1e12,
                     bus_bandwidth / 1e9);
    return t;
  }
  t += fmt::format("assumed rates ({}): GEMM bf16 {:.4g} TFLOP/s (the fused dW + AdamW product {:.4g}, {:.2g} of its "
                   "epilogue's memory time after it), fp32{} {:.4g} "
                   "(efficiency {:.2f} of peak), attention "
                   "bf16 {:.4g} TFLOP/s (Hopper kernels at T {:.0f}: forward {:.4g}, backward {:.4g}, at d 128 "
                   "{:.4g}; at T keys x T ({:.0f} + t0) / ({:.0f} (T + t0)), t0 {:.0f} / {:.0f}{}), fp32 {:.4g}, "
                   "memory {:.4g} TB/s, collectives {:.4g} GB/s bus bandwidth\n",
                   rates.device, rates.gemm_bf16 / 1e12, rates.dw_adamw_gemm / 1e12, rates.dw_adamw_epilogue_exposed,
                   rates.gemm_f32_mode.empty() ? "" : fmt::format(" ({})", rates.gemm_f32_mode), rates.gemm_f32 / 1e12,
                   rates.gemm_efficiency,
                   rates.attention_bf16 / 1e12, rates.sm90_rate_seq_len, rates.attention_bf16_fwd_sm90 / 1e12,
                   rates.attention_bf16_bwd_sm90 / 1e12, rates.attention_bf16_bwd_sm90_d128 / 1e12,
                   rates.sm90_rate_seq_len, rates.sm90_rate_seq_len, rates.attention_sm90_fwd_t0,
                   rates.attention_sm90_bwd_t0,
                   deterministic ? fmt::format("; deterministic: the Hopper backward (bf16, d 64-128) at {:.3g}x its "
                                               "default time (dQ in key-tile order), the mma.sync kernels (d 16 / 32) "
                                               "3.5x the forward's FLOPs at bf16's rate with t0 {:.0f} (fp32 at its "
                                               "own rate)",
                                               rates.attention_det_bwd_sm90, rates.attention_det_bwd_t0)
                                 : "",
                   rates.attention_f32 / 1e12, rates.memory_bandwidth / 1e12,
                   bus_bandwidth / 1e9);
  return t;
}

}  // namespace trainer
