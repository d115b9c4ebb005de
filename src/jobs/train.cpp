// job = "train": forward / forward_backward / train_step benchmark and training loop.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>

#include "core/interrupt.h"
#include "core/test_hooks.h"
#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "io/result_record.h"
#include "io/safetensors.h"
#include "io/token_data.h"
#include "jobs/job.h"
#include "jobs/train_checkpoint.h"
#include "jobs/train_setup.h"
#include "plan/planner.h"
#include "jobs/train_step.h"
#include "model/model.h"
#include "optim/schedule.h"
#include "parallel/strategy.h"
#include "profile/profiler.h"

namespace trainer {

namespace {

// Peak dense rates used for MFU, measured on one H200 (ANCHORS.md): bf16 GEMM 756 TFLOP/s, fp32 (no TF32) 51, TF32
// 378; 3xTF32 does three TF32 products per fp32 one (126).
double peak_tflops(const RunConfig& c) {
  if (c.device != "cuda") return 0.0;
  if (bf16_precision(c.precision)) return 756.0;
  const Fp32Matmul m = parse_fp32_matmul(c.fp32_matmul);
  return m == Fp32Matmul::ieee ? 51.0 : (m == Fp32Matmul::tf32 ? 378.0 : 126.0);
}

std::string fmt_rate(double tok_s) {
  if (tok_s >= 1e6) return fmt::format("{:.2f}M", tok_s / 1e6);
  if (tok_s >= 1e3) return fmt::format("{:.1f}k", tok_s / 1e3);
  return fmt::format("{:.0f}", tok_s);
}

/// Calls `f` when the scope ends, on every path (an exception's included).
template <class F>
struct ScopeExit {
  F f;
  ~ScopeExit() { f(); }
};
template <class F>
ScopeExit(F) -> ScopeExit<F>;

/// Gathers every rank's trace events to rank 0, which writes one Chrome trace file (atomically). Collective.
void write_trace(const std::string& path, const Profiler& profiler, Communicator& comm) {
  std::string all = profiler.trace_events(comm.rank()).dump();
  if (comm.size() > 1) {
    const std::vector<std::string> parts = comm.gather_host(all, /*root=*/0);
    if (comm.rank() != 0) return;
    test_pause("TRAINER_TEST_TRACE_PAUSE_S", "before merging the trace");  // a large trace's merge, held up
    nlohmann::json merged = nlohmann::json::array();
    for (const std::string& part : parts)
      for (auto& e : nlohmann::json::parse(part)) merged.push_back(std::move(e));
    all = merged.dump();
  }
  const std::string head = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": ", tail = "}\n";
  write_file_atomic(path, {{head.data(), head.size()}, {all.data(), all.size()}, {tail.data(), tail.size()}});
}

/// What the activation policy made of the model: the segments (stored / flat / nested runs of blocks), how many
/// block forwards the backward recomputes, and the LM head's chunk.
nlohmann::json checkpointing_record(Model& model, int micro, int T) {
  const ActivationPolicy& p = model.policy();
  nlohmann::json segs = nlohmann::json::array();
  for (const Segment& s : p.segments(model.dims().num_layers))
    segs.push_back({s.begin, s.end,
                    s.kind == Segment::Kind::stored ? "stored" : s.kind == Segment::Kind::flat ? "flat" : "nested"});
  int recomputes = 0;
  for (const UnitUse& u : model.unit_schedule(true)) recomputes += u.pass == UnitPass::recompute;
  return {{"policy", p.policy},
          {"k", p.k},
          {"blocks", p.blocks ? nlohmann::json(*p.blocks) : nlohmann::json(nullptr)},
          {"segments", segs},
          {"recomputed_blocks_per_microbatch", recomputes},
          {"lm_head_chunk_tokens",
           lm_head_chunk_rows(int64_t(micro) * T, model.dims().vocab_size, model.dims().d_model, model.act_dtype(),
                              p.lm_head_chunk_tokens)}};
}

/// Why the step of this run is not captured in a CUDA graph ("" when it is: from its second step on). `steps` is the
/// number of steps this run executes.
std::string cuda_graph_why_not(const RunConfig& c, int steps) {
  if (!c.cuda_graph) return "cuda_graph is false";
  if (c.device != "cuda") return fmt::format("device {}: graphs are a CUDA feature", c.device);
  if (c.parallel.strategy != "none")
    return fmt::format("parallel.strategy {}: its communication (the Communicator's calls, host all-reduces of the "
                       "norm) is not captured yet; strategy none only", c.parallel.strategy);
  if (c.profile.trace) return "profile.trace times every op with its own events";
  if (c.profile.nvtx) return "profile.nvtx: the ranges would be recorded once, at the capture, not on replays";
  if (steps < 2) return "fewer than 2 steps: the first step runs uncaptured (GEMM tuning, workspace sizes)";
  return "";
}

}  // namespace

BackendOptions backend_options(const RunConfig& cfg) {
  BackendOptions o;
  o.fp32_matmul = parse_fp32_matmul(cfg.fp32_matmul);
  o.gemm_autotune = gemm_autotune_on(cfg);
  o.deterministic = cfg.deterministic;
  return o;
}

nlohmann::json gemm_autotune_record(const RunConfig& cfg, const GemmTuning* t) {
  const bool on = gemm_autotune_on(cfg) && cfg.device == "cuda";
  nlohmann::json j = {{"enabled", on}};
  if (!on) {
    j["why_not"] = cfg.device != "cuda" ? "the cpu backend (OpenBLAS) has no algorithms to choose from"
                   : cfg.deterministic  ? "deterministic is true: cuBLASLt's first (heuristic) algorithm is used"
                                        : "gemm_autotune is false: cuBLASLt's first (heuristic) algorithm is used";
    return j;
  }
  if (!t) {
    j["note"] = "each point's backend times the GEMM candidates of its shapes in the point's warm-up iterations";
    return j;
  }
  j.update({{"shapes", t->shapes},
            {"changed", t->changed},
            {"heuristic_ms", t->heuristic_ms},
            {"tuned_ms", t->tuned_ms},
            {"note", "the first call of each GEMM shape timed up to 8 cuBLASLt candidates and kept the fastest (the "
                     "first choice unless another was at least 3% faster); "
                     "heuristic_ms / tuned_ms: one call of each tuned shape, summed, with cuBLASLt's first choice and "
                     "with the kept algorithm"}});
  return j;
}

nlohmann::json run_train(const RunConfig& cfg, const RunContext& ctx) {
  using nlohmann::json;
  const Device dev = cfg.device == "cuda" ? Device::cuda : Device::cpu;
  BackendOptions bopts = backend_options(cfg);
  bopts.memory_timeline = ctx.memory_timeline;  // before anything is allocated; main() writes it
  auto be = make_backend(dev, ctx.local_rank, bopts);
  if (ctx.plan) {
    spdlog::info("{}", ctx.plan->summary_line());
    const size_t cap = be->device_memory_bytes();
    if (cap && ctx.plan->peak_bytes > cap)
      spdlog::warn("the plan predicts a peak of {} on rank {}, more than the device's {}: expect out of memory "
                   "(trainer --plan shows where; checkpointing or microbatches lower it)",
                   format_bytes(ctx.plan->peak_bytes), ctx.rank, format_bytes(cap));
  }

  Profiler profiler(*be, cfg.profile.nvtx, cfg.profile.trace.has_value());
  bool trace_tried = false;  // write_trace was called (it says itself when it fails), or the log said why not
  const auto tried_trace = [&] {
    trace_tried = true;
    if (ctx.trace_told) ctx.trace_told->store(true);
  };
  bool stepping = false;  // the steps have begun (bad input the set-up finds is not a run that failed)
  // A run that fails (out of memory, an error on one rank) ends without the trace's collective gather: say so
  const int exceptions_at_start = std::uncaught_exceptions();
  const ScopeExit no_trace{[&] {
    if (std::uncaught_exceptions() > exceptions_at_start && profiler.tracing() && stepping && !trace_tried &&
        ctx.rank == 0) {
      tried_trace();
      spdlog::warn("profile.trace: no trace written: the run failed before its end");
    }
  }};
  auto comm = make_communicator(cfg, *be, ctx);
  TrainSetup setup = setup_training(cfg, *be, comm.get(), ctx.world_size, /*init_weights=*/true);
  Model& model = *setup.model;
  Strategy* strategy = setup.strategy.get();
  const ModelDims& dims = setup.dims;
  const StepShape& shape = setup.shape;
  const int T = dims.context_length;
  const int rows_per_rank = setup.rows_per_rank, micro = shape.micro, n_micro = shape.n_micro;
  const int64_t global_tokens = shape.global_tokens, rank_tokens = setup.rank_tokens;
  const std::string& phase = cfg.bench.phase;
  const bool do_backward = shape.backward, do_step = shape.optimizer;
  const int total_steps = cfg.bench.warmup_steps + cfg.bench.measure_steps;
  const nlohmann::json changed = changed_from_preset(cfg.model);
  std::string preset_note;
  if (!cfg.model.preset.empty()) {
    preset_note = fmt::format(" (preset {}", cfg.model.preset);
    for (const auto& [k, v] : changed.items())
      preset_note += fmt::format(", {} {} instead of {}", k, v["used"].get<int>(), v["preset"].get<int>());
    preset_note += ")";
  }
  spdlog::info("model: {} parameters ({:.1f} M), d_model {}, d_ff {}, {} layers, {} heads, vocab {}, context {}{}",
               model.layout().count(), model.layout().count() / 1e6, dims.d_model, dims.d_ff, dims.num_layers,
               dims.num_heads, dims.vocab_size, dims.context_length, preset_note);
  auto source = make_token_source(cfg.data, dims.vocab_size);
  std::vector<int32_t> inputs(static_cast<size_t>(rank_tokens)), targets(static_cast<size_t>(rank_tokens));
  const size_t setup_bytes = be->memory().total;
  if (cfg.data.source != "tokens" && cfg.data.path)
    spdlog::warn("data.path '{}' is ignored: data.source is '{}' (set data.source=tokens to train on the file)",
                 *cfg.data.path, cfg.data.source);
  if (!do_step && cfg.optimizer.max_grad_norm)  // (its default is null: a value here was asked for)
    spdlog::warn("optimizer.max_grad_norm {} is ignored: bench.phase '{}' takes no optimizer step (nothing is "
                 "clipped; set bench.phase=train_step to clip)", *cfg.optimizer.max_grad_norm, cfg.bench.phase);
  spdlog::info("{} on {}: data {}, phase {}, precision {}, attention {}, strategy {}, {} rank(s), batch {} = {} x {} "
               "x {} (ranks x microbatches x rows), {} steps ({} warm-up); set-up memory {}",
               cfg.job, be->description(),
               cfg.data.source == "tokens" ? fmt::format("'{}' ({})", cfg.data.path.value_or(""), cfg.data.sampling)
                                           : std::string("random tokens"),
               phase, cfg.precision, cfg.attention, strategy->name(), ctx.world_size,
               cfg.data.batch_size, ctx.world_size, n_micro, micro, total_steps, cfg.bench.warmup_steps,
               format_bytes(setup_bytes));
  json in_gemm_record = nullptr;  // the record's in_gemm: which products the run fused (null: in_gemm off)
  if (cfg.optimizer.in_backward.value_or(false) && cfg.optimizer.in_gemm.value_or(false)) {
    const auto [fused, all] = in_gemm_fused_products(model.layout(), cfg.optimizer.in_gemm_min_elements);
    in_gemm_record = {{"fused_products", fused}, {"products", all},
                      {"min_elements", cfg.optimizer.in_gemm_min_elements}};
    spdlog::info("optimizer: in_gemm: {} of {} weight-gradient products apply AdamW to their weights in the same call "
                 "(one fused kernel on an sm_90 GPU; optimizer.in_gemm_min_elements {}); the other parameters are "
                 "updated after their unit's backward (in_backward)",
                 fused, all, cfg.optimizer.in_gemm_min_elements);
  }
  if (!do_backward) {
    spdlog::info("activations: phase forward (inference): each block's activations are freed once its output exists; "
                 "LM head in chunks of {} tokens",
                 lm_head_chunk_rows(int64_t(micro) * T, dims.vocab_size, dims.d_model, model.act_dtype(),
                                    cfg.checkpointing.lm_head_chunk_tokens));
  } else {
    int recomputes = 0;
    for (const UnitUse& u : model.unit_schedule(do_backward)) recomputes += u.pass == UnitPass::recompute;
    spdlog::info("activations: checkpointing.policy {}{}; a stored block keeps {}; the backward recomputes {} of "
                 "{} block forwards per microbatch; LM head in chunks of {} tokens",
                 cfg.checkpointing.policy,
                 cfg.checkpointing.policy == "every_k" ? fmt::format(" (k {})", cfg.checkpointing.k) : "",
                 format_bytes(model.saved_bytes_per_block(micro, T)), recomputes, dims.num_layers,
                 lm_head_chunk_rows(int64_t(micro) * T, dims.vocab_size, dims.d_model, model.act_dtype(),
                                    cfg.checkpointing.lm_head_chunk_tokens));
  }

  // One set of events per step: start, then (forward end, backward end) per microbatch, comm end, optimizer end.
  std::vector<std::unique_ptr<Event>> ev;
  for (int i = 0; i < 2 * n_micro + 3; ++i) ev.push_back(be->make_event());
  StepEvents marks;
  marks.start = ev[0].get();
  for (int m = 0; m < n_micro; ++m) {
    marks.forward_end.push_back(ev[size_t(1 + 2 * m)].get());
    marks.backward_end.push_back(ev[size_t(2 + 2 * m)].get());
  }
  marks.comm_end = ev[size_t(2 * n_micro + 1)].get();
  marks.optimizer_end = ev[size_t(2 * n_micro + 2)].get();
  std::vector<double> t_fwd, t_bwd, t_opt, t_step, t_comm, t_exposed;
  // profile.trace: the measured steps' trace written (collective) and named in `rec` (its profile section); "" or why
  // the write failed. At the end of the run, and at a loss that is not finite.
  const auto save_trace = [&](json& rec) -> std::string {
    rec["profile"] = profiler.summary();
    tried_trace();
    try {
      write_trace(*cfg.profile.trace, profiler, *comm);
    } catch (const std::exception& e) {
      return e.what();
    }
    rec["profile"]["trace"] = *cfg.profile.trace;
    if (ctx.rank == 0)  // rank 0 writes the one file of all ranks
      spdlog::info("trace of {} step(s) written to {} (open in chrome://tracing or ui.perfetto.dev)", t_step.size(),
                   *cfg.profile.trace);
    return "";
  };
  json losses = json::array(), gnorms = json::array(), lrs = json::array();
  json interrupted = nullptr;  // {signal, steps_done, steps_planned} when an interrupt stopped the loop early

  // init.resume: the optimizer state and the step to continue at (the weights came with setup_training); the
  // schedule and the data are functions of the step. output.checkpoint: written by ckpt.write (train_checkpoint.h).
  TrainCheckpointer ckpt(cfg, *be, model, *strategy, *comm, total_steps);
  const int first_step = int(ckpt.resume(setup.resume_dir, setup.resume_manifest, setup.weights_read_s));
  int steps_done = first_step;
  // A checkpoint that cannot be written (a full disk) fails the run; its record keeps the loss curve so far and
  // the checkpoints written before it (the last good one), as a diverged run keeps its losses.
  auto write_checkpoint = [&](int64_t at) {
    try {
      ckpt.write(at);
    } catch (const OutOfMemory&) {
      throw;
    } catch (const ConfigError&) {
      throw;
    } catch (const std::exception& e) {
      throw PartialRunError(e.what(), {{"loss", {{"per_step", losses}, {"final", nullptr}}},
                                       {"grad_norm", {{"per_step", gnorms}}},
                                       {"lr", {{"per_step", lrs}}},
                                       {"steps", {{"total", total_steps}, {"first", first_step},
                                                  {"done", steps_done}}},
                                       {"checkpoint", ckpt.record()}});
    }
  };

  // cuda_graph: the run's first step runs uncaptured (it tunes the GEMMs and sizes the workspaces); the second is
  // captured once into a CUDA graph and launched, and every later step launches the graph again. The step's inputs
  // that change sit in device buffers the graph reads: the tokens (set_step_tokens), the loss accumulator, AdamW's
  // step values (lr, t: begin_train_step uploads them before each launch). A replayed step is timed as a whole.
  const std::string graph_why_not = cuda_graph_why_not(cfg, total_steps - first_step);
  std::unique_ptr<Graph> graph;
  json graph_record = json::object();
  if (!graph_why_not.empty() && cfg.cuda_graph && cfg.device == "cuda")
    spdlog::info("cuda graph: not used ({})", graph_why_not);

  stepping = true;
  for (int step = first_step; step < total_steps; ++step) {
    const bool measured = step >= cfg.bench.warmup_steps;
    // The step's tokens are drawn and uploaded before its first event: the host work is not part of the step time.
    model.begin_step_losses(rank_tokens);
    source->batch(step, cfg.data.batch_size, ctx.rank * rows_per_rank, rows_per_rank, T, inputs.data(),
                  targets.data());
    model.set_step_tokens(inputs.data(), targets.data());
    if (measured) profiler.begin_step(step + 1);  // numbered from 1, as in the log lines
    const double lr = learning_rate(cfg.optimizer, step, total_steps);
    const bool replayed = graph_why_not.empty() && step > first_step;
    double gnorm = std::nan("");
    if (replayed) {
      begin_train_step(*strategy, shape, lr);
      if (!graph) {
        const auto t0 = std::chrono::steady_clock::now();
        graph = be->capture(
            [&] { enqueue_train_step(*be, model, *strategy, shape, lr, cfg.optimizer.max_grad_norm); });
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        graph_record.update({{"captured_step", step + 1}, {"nodes", graph->nodes()}, {"capture_ms", ms}});
        spdlog::info("cuda graph: step {} captured ({} nodes, {:.1f} ms to capture and instantiate); every later "
                     "step replays it", step + 1, graph->nodes(), ms);
      }
      be->record(*ev[0]);
      graph->launch();
      be->record(*ev[size_t(2 * n_micro + 2)]);
      if (do_step) gnorm = strategy->step_grad_norm();  // syncs
    } else {
      gnorm = train_step(*be, model, *strategy, shape, lr, cfg.optimizer.max_grad_norm, marks);
    }
    // One host all_reduce per step carries the loss and whether any rank was asked to stop (interrupt.h), so the
    // ranks leave the loop after the same step at no extra collective.
    double loss_and_stop[2] = {model.step_loss_sum(), interrupt_signal() != 0 ? 1.0 : 0.0};
    comm->all_reduce_host(loss_and_stop, 2, HostOp::sum);  // syncs
    const double loss = loss_and_stop[0] / double(global_tokens);
    be->synchronize();

    double fwd = 0, bwd = 0, opt = 0;
    if (!replayed) {  // a replayed graph has no events between its phases
      for (int m = 0; m < n_micro; ++m) {
        fwd += be->elapsed_ms(m == 0 ? *ev[0] : *ev[2 * m], *ev[1 + 2 * m]);
        bwd += be->elapsed_ms(*ev[1 + 2 * m], *ev[2 + 2 * m]);
      }
      bwd += be->elapsed_ms(*ev[2 * n_micro], *ev[2 * n_micro + 1]);  // finish_backward (gradient communication)
      opt = be->elapsed_ms(*ev[2 * n_micro + 1], *ev[2 * n_micro + 2]);
    }
    const double step_ms = std::max<double>(be->elapsed_ms(*ev[0], *ev[2 * n_micro + 2]), fwd + bwd + opt);
    losses.push_back(loss);
    gnorms.push_back(do_step ? json(gnorm) : json(nullptr));
    lrs.push_back(do_step ? json(lr) : json(nullptr));
    if (measured) {
      if (!graph_why_not.empty()) {  // with a graph no phases: an uncaptured step 1 is not mixed with replays
        t_fwd.push_back(fwd);
        if (do_backward) t_bwd.push_back(bwd);
        if (do_step) t_opt.push_back(opt);
      }
      t_step.push_back(step_ms);
      t_comm.push_back(strategy->comm_ms());
      t_exposed.push_back(strategy->comm_exposed_ms());
      profiler.end_step(comm.get());
    }
    if (!std::isfinite(loss)) {  // (every rank: the loss is all-reduced)
      json partial = {{"loss", {{"per_step", losses}, {"final", nullptr}}},
                      {"grad_norm", {{"per_step", gnorms}}},
                      {"lr", {{"per_step", lrs}}}};
      if (profiler.tracing() && !t_step.empty()) {  // the trace of the steps up to this one: wanted most here
        // Every rank waits here until rank 0 has written the file (a large trace takes seconds to merge): a rank
        // that threw first would send rank 0 its failure notice, whose listener ends the job before the write
        const ScopedHostTimeout wait_for_write(*comm, checkpoint_wait(cfg.parallel));
        if (const std::string err = save_trace(partial); !err.empty())
          spdlog::warn("profile.trace: the trace could not be written: {}", err);
        comm->barrier();
      } else if (profiler.tracing() && ctx.rank == 0) {
        tried_trace();
        spdlog::warn("profile.trace: no trace written: the loss was not finite before the first measured step");
      }
      throw PartialRunError(fmt::format("loss is {} at step {}", loss, step + 1), partial);
    }
    if (cfg.bench.log_every > 0 && (step % cfg.bench.log_every == 0 || step == total_steps - 1)) {
      const double tok_s = double(global_tokens) / (step_ms / 1e3);
      std::string line = fmt::format("step {:4d}/{} | loss {:.4f}", step + 1, total_steps, loss);
      if (do_step) line += fmt::format(" | gnorm {:.3f} | lr {:.2e}", gnorm, lr);
      line += fmt::format(" | {:.1f} ms | {} tok/s | mem {}{}", step_ms, fmt_rate(tok_s),
                          format_bytes(be->memory().peak_total), measured ? "" : " (warm-up)");
      if (ctx.world_size > 1) line += fmt::format(" | comm_exposed {:.1f} ms", strategy->comm_exposed_ms());
      spdlog::info("{}", line);
    }
    steps_done = step + 1;
    if (ckpt.due(step + 1)) write_checkpoint(step + 1);  // collective: every rank
    if (loss_and_stop[1] > 0 && step + 1 < total_steps) {  // leave the loop; the end-of-run code below still runs
      int64_t sig = interrupt_signal();  // the rank(s) that received one: every rank names the same signal
      comm->all_reduce_host(&sig, 1, HostOp::max);  // every rank is here, after the same step
      interrupted = {{"signal", interrupt_signal_name(int(sig))},
                     {"steps_done", step + 1},
                     {"steps_planned", total_steps}};
      spdlog::warn("interrupted ({}): stopping after step {} of {}{}; a second interrupt stops at once",
                   interrupted["signal"].get<std::string>(), step + 1, total_steps,
                   !cfg.output.checkpoint       ? ""
                   : ckpt.written(step + 1) ? ", its checkpoint written"
                                            : ", writing the checkpoint");
      break;
    }
  }
  write_checkpoint(steps_done);  // at the end or the interrupt (no-op without output.checkpoint or when just written)

  // ---- the job's part of the result record -----------------------------------------------------------------------
  // A step is done when its slowest rank is: the step statistics (and the throughput) use, per step, the maximum over
  // ranks of the step time; each rank's own mean is listed in timing.per_rank.
  double own_mean_step = 0;
  for (double x : t_step) own_mean_step += x / double(t_step.size());
  comm->all_reduce_host(t_step.data(), t_step.size(), HostOp::max);
  json r;
  const double fpt = forward_flops_per_token(dims);
  r["model"] = {{"preset", cfg.model.preset.empty() ? json(nullptr) : json(cfg.model.preset)},
                {"changed_from_preset", changed},
                {"parameters", model.layout().count()},
                {"flops_per_token", {{"forward", fpt}, {"train_step", 3 * fpt}}},
                {"dims", {{"vocab_size", dims.vocab_size}, {"context_length", dims.context_length},
                          {"d_model", dims.d_model}, {"d_ff", dims.d_ff}, {"num_layers", dims.num_layers},
                          {"num_heads", dims.num_heads}, {"d_head", dims.d_head()}}}};
  // measured: the steps this run timed (timing.step's samples), fewer than bench.measure_steps after a resume or an
  // interrupt.
  r["steps"] = {{"total", total_steps}, {"first", first_step}, {"warmup", cfg.bench.warmup_steps},
                {"measured", int(t_step.size())}, {"done", steps_done}, {"microbatches", n_micro},
                {"microbatch_size", micro}, {"tokens_per_step", global_tokens}};
  r["interrupted"] = interrupted;  // main() turns it into status "interrupted" and exit code 4
  r["timing"] = {{"forward", timing_stats(t_fwd)}, {"backward", timing_stats(t_bwd)},
                 {"optimizer", timing_stats(t_opt)}, {"step", timing_stats(t_step)},
                 {"checkpoint_write_s", ckpt.write_seconds()}, {"resume_read_s", ckpt.read_seconds()}};
  r["checkpoint"] = ckpt.record();
  graph_record["used"] = graph != nullptr;
  if (graph)
    graph_record["note"] = "the steps from captured_step on replayed the graph; timing.forward / backward / "
                           "optimizer are not split (null) in a run that uses a graph: timing.step is the whole step";
  else
    graph_record["why_not"] = graph_why_not.empty() ? "the run ended before its second step" : graph_why_not;
  r["cuda_graph"] = graph_record;
  r["in_gemm"] = in_gemm_record;
  if (ctx.world_size > 1) {
    r["timing"]["comm"] = timing_stats(t_comm);
    r["timing"]["comm_exposed"] = timing_stats(t_exposed);
    std::vector<double> means(size_t(ctx.world_size));
    comm->all_gather_host(&own_mean_step, sizeof own_mean_step, means.data());
    json per_rank = json::array();
    for (int i = 0; i < ctx.world_size; ++i)
      per_rank.push_back({{"rank", i}, {"step_mean_ms", t_step.empty() ? json(nullptr) : json(means[size_t(i)])}});
    r["timing"]["per_rank"] = per_rank;
  }
  double mean_step = 0;
  for (double x : t_step) mean_step += x / double(t_step.size());
  const double flops_per_step = fpt * (do_step || do_backward ? 3.0 : 1.0) * double(global_tokens);
  const double tflops = t_step.empty() ? 0.0 : flops_per_step / (mean_step / 1e3) / 1e12 / ctx.world_size;
  const double peak = peak_tflops(cfg);
  const bool timed = !t_step.empty();  // no measured steps: no rates (null, not 0)
  r["throughput"] = {{"tokens_per_s", timed ? json(double(global_tokens) / (mean_step / 1e3)) : json(nullptr)},
                     {"model_tflops_per_gpu", timed ? json(tflops) : json(nullptr)},
                     {"peak_tflops", peak > 0 ? json(peak) : json(nullptr)},
                     {"mfu", peak > 0 && timed ? json(tflops / peak) : json(nullptr)}};
  const MemoryStats& ms = be->memory();
  json by_cat = json::object(), cat_peak = json::object();
  for (int i = 0; i < kNumCategories; ++i) {
    by_cat[category_name(Category(i))] = ms.at_peak[i];
    cat_peak[category_name(Category(i))] = ms.peak[i];
  }
  r["memory"] = {{"peak_bytes", ms.peak_total},
                 {"reserved_peak_bytes", be->peak_reserved_bytes() ? json(be->peak_reserved_bytes()) : json(nullptr)},
                 {"by_category", by_cat},
                 {"category_peaks", cat_peak},
                 {"optimizer_state_bytes", strategy->optimizer_state_bytes()},
                 {"saved_activation_bytes_per_block", model.saved_bytes_per_block(micro, T)},
                 {"checkpointing", checkpointing_record(model, micro, T)},
                 {"note", "bytes allocated through the trainer's pool; by_category is the split at the peak; "
                          "saved_activation_bytes_per_block: what one stored (not recomputed) block keeps for its "
                          "backward, whatever the policy (checkpointing says which blocks are recomputed); "
                          "reserved_peak_bytes: the most the caching allocator held from the device (live blocks "
                          "rounded up plus cached free ones; null on the cpu, which has no cache)"}};
  if (ctx.world_size > 1) {  // every rank's peak and optimizer state (zero1 shards differ between ranks)
    const uint64_t mine[2] = {ms.peak_total, strategy->optimizer_state_bytes()};
    std::vector<uint64_t> all(2 * size_t(ctx.world_size));
    comm->all_gather_host(mine, sizeof mine, all.data());
    json per_rank = json::array();
    for (int i = 0; i < ctx.world_size; ++i)
      per_rank.push_back({{"rank", i}, {"peak_bytes", all[2 * i]}, {"optimizer_state_bytes", all[2 * i + 1]}});
    r["memory"]["per_rank"] = per_rank;
  }
  r["loss"] = {{"per_step", losses}, {"final", losses.empty() ? json(nullptr) : losses.back()}};
  r["grad_norm"] = {{"per_step", gnorms}};
  r["lr"] = {{"per_step", lrs}};
  r["backend"] = be->description();
  const GemmTuning tune = be->gemm_tuning();
  r["gemm_autotune"] = gemm_autotune_record(cfg, &tune);
  if (tune.shapes > 0)
    spdlog::info("gemm autotune: {} shapes, {} moved off cuBLASLt's first choice; one call of each: {:.3f} -> "
                 "{:.3f} ms",
                 tune.shapes, tune.changed, tune.heuristic_ms, tune.tuned_ms);
  if (profiler.tracing())  // a failed write: the record keeps the run's measurements, with status error
    if (const std::string err = save_trace(r); !err.empty())
      throw PartialRunError(fmt::format("profile.trace: the trace could not be written: {}", err), r);
  if (!t_step.empty())
    spdlog::info("done: step {:.2f} ms mean over {} steps | {} tok/s | {:.3g} TFLOP/s | peak memory {} | loss {:.4f}",
                 mean_step, t_step.size(), fmt_rate(r["throughput"]["tokens_per_s"].get<double>()), tflops,
                 format_bytes(ms.peak_total), losses.back().get<double>());
  // what is freed from here on (the model, strategy, backend) is the run's end; after an out-of-memory the memory
  // timeline labels the unwinding so itself (MemoryTimeline::log)
  be->memory().phase = "teardown";
  return r;
}

}  // namespace trainer
