// trainer: trains the CS336 basics Transformer LM and measures how fast and how lean training can be made.
//
//   trainer [CONFIG.json] [--set key.path=value ...] [--log-all-ranks]
//   trainer --print-config [CONFIG.json] [--set ...] [--world-size N]  |  trainer --help  |  trainer --version
//   trainer --plan [CONFIG.json] [--set ...] [--world-size N] [--device cpu|cuda] [--fit] [--json]   (runs nothing)
//   mpirun -np 2 trainer configs/small.json --set parallel.strategy=ddp_bucketed
//
// Exit codes: 0 ok; 2 bad input (one line on stderr, nothing written); 1 the run failed (record with status
// "error"; a diverged training run keeps its per-step losses up to the failing step); 3 out of memory (record with
// status "oom"); 4 interrupted (SIGINT, SIGTERM, SIGHUP, SIGUSR1 or SIGUSR2: the train job stopped after a step,
// wrote its checkpoint when configured and the record with status "interrupted"; see core/interrupt.h). A second
// signal stops at once (128 + signal number). Rank 0 marks the record "running" before the job starts and replaces it
// at the end.
#include <mpi.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <optional>
#include <thread>

#include "backend/backend.h"
#include "build_info.h"
#include "config/config.h"
#include "core/interrupt.h"
#include "core/memory.h"
#include "core/test_hooks.h"
#include "dist/bootstrap.h"
#include "git_info.h"
#include "io/result_record.h"
#include "jobs/job.h"
#include "model/model.h"
#include "parallel/strategy.h"
#include "plan/fit.h"
#include "plan/host_memory.h"
#include "plan/planner.h"

using namespace trainer;

#ifdef TRAINER_HAVE_CUDA
#define TRAINER_HAVE_CUDA_BUILD true
#else
#define TRAINER_HAVE_CUDA_BUILD false
#endif

namespace {

struct Args {
  std::string config;
  std::vector<std::string> overrides;
  bool help = false, version = false, print_config = false, log_all_ranks = false;
  bool plan = false, json = false, fit = false;  // --plan, --json, --fit
  int world_size = 0;               // --world-size (0: not given)
  std::string device;               // --device (plan only; "": the config's)
  double device_memory_gib = 0;     // --device-memory (plan only; 0: --gpu's)
  std::string gpu;                  // --gpu (plan only; "": h200)
};

/// The value of option argv[i] given as "--opt VALUE" or "--opt=VALUE" (advances i for the first form).
std::string option_value(int argc, char** argv, int& i, const std::string& opt) {
  const std::string s = argv[i];
  if (s.size() > opt.size() && s[opt.size()] == '=') return s.substr(opt.size() + 1);
  CONFIG_CHECK(i + 1 < argc, "{} needs a value (see trainer --help)", opt);
  return argv[++i];
}

/// All of `v` read as a number by `conv` (std::stoi, std::stod with the count of characters used), or nullopt (no
/// number, trailing text, out of range).
template <class T, class F>
std::optional<T> whole_number(const std::string& v, F conv) {
  try {
    size_t used = 0;
    const T x = conv(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

bool is_option(const std::string& s, const std::string& opt) {
  return s == opt || (s.rfind(opt + "=", 0) == 0);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (s == "--version") {
      a.version = true;
    } else if (s == "--print-config") {
      a.print_config = true;
    } else if (s == "--log-all-ranks") {
      a.log_all_ranks = true;
    } else if (s == "--plan") {
      a.plan = true;
    } else if (s == "--json") {
      a.json = true;
    } else if (s == "--fit") {
      a.fit = true;
    } else if (is_option(s, "--world-size")) {
      const std::string v = option_value(argc, argv, i, "--world-size");
      const auto n = whole_number<int>(v, [](const std::string& t, size_t* used) { return std::stoi(t, used); });
      CONFIG_CHECK(n && *n >= 1, "--world-size '{}': expected an integer from 1 to {}", v, INT_MAX);
      a.world_size = *n;
    } else if (is_option(s, "--device-memory")) {
      const std::string v = option_value(argc, argv, i, "--device-memory");
      const auto g = whole_number<double>(v, [](const std::string& t, size_t* used) { return std::stod(t, used); });
      CONFIG_CHECK(g && *g >= 1.0 / 1024 && *g < 1e6, "--device-memory '{}': expected GiB, a number from 1/1024 "
                   "(1 MiB) to below 1e6", v);
      a.device_memory_gib = *g;
    } else if (is_option(s, "--gpu")) {
      a.gpu = option_value(argc, argv, i, "--gpu");
      try {
        gpu_spec(a.gpu);
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("--gpu: {}", e.what()));
      }
    } else if (is_option(s, "--device")) {
      a.device = option_value(argc, argv, i, "--device");
      CONFIG_CHECK(a.device == "cpu" || a.device == "cuda", "--device '{}': expected cpu or cuda", a.device);
    } else if (s == "--set" || s.rfind("--set=", 0) == 0) {
      std::string kv;
      if (s == "--set") {
        CONFIG_CHECK(i + 1 < argc, "--set needs an argument key.path=value");
        kv = argv[++i];
      } else {
        kv = s.substr(6);
      }
      CONFIG_CHECK(kv.find('=') != std::string::npos && kv.find('=') > 0,
                   "--set '{}': expected key.path=value (e.g. --set precision=bf16)", kv);
      a.overrides.push_back(kv);
    } else if (!s.empty() && s[0] == '-') {
      throw ConfigError(fmt::format("unknown option '{}' (see trainer --help)", s));
    } else {
      CONFIG_CHECK(a.config.empty(), "more than one config file given ('{}' and '{}')", a.config, s);
      a.config = s;
    }
  }
  CONFIG_CHECK(a.plan || (!a.json && !a.fit && a.device.empty() && a.device_memory_gib == 0 && a.gpu.empty()),
               "--json, --device, --gpu, --device-memory and --fit apply to --plan only");
  CONFIG_CHECK(a.plan || a.print_config || a.world_size == 0,
               "--world-size applies to --plan and --print-config only (a run's world is mpirun's -np)");
  if (!a.gpu.empty() && a.device.empty()) a.device = "cuda";  // a GPU named: a cuda plan
  CONFIG_CHECK(!(a.plan && a.print_config), "--plan and --print-config: choose one");
  return a;
}

/// The config for --plan: the file and overrides resolved for `world` ranks on the device to plan for (--device;
/// else the config's; for device auto cuda when the config asks for bf16 or flash2 or cannot run on the CPU, else
/// cpu). *assumed says how the device was chosen when it was not given. Its files are checked where they exist here
/// (kPlanFiles): a cluster's config, its data and outputs there, plans on a laptop.
constexpr FileChecks kPlanFiles = FileChecks::present;
RunConfig load_plan_config(const Args& a, int world, std::string* assumed) {
  std::vector<std::string> ov = a.overrides;
  if (!a.device.empty()) {
    ov.push_back("device=" + a.device);
    return load_config(a.config, ov, world, a.device == "cuda", {}, nullptr, kPlanFiles);
  }
  RunConfig on_cuda = load_config(a.config, ov, world, /*cuda_available=*/true, {}, nullptr, kPlanFiles);
  if (on_cuda.device != "cuda") return on_cuda;  // the config says cpu
  // device 'cuda' or 'auto'? Without a GPU, auto resolves to cpu (asked with the CUDA-only settings taken out).
  bool is_auto = false;
  try {
    std::vector<std::string> probe = ov;
    for (const char* o : {"precision=fp32", "attention=naive", "parallel.comm=mpi", "parallel.reduce_dtype=fp32"})
      probe.push_back(o);
    is_auto = load_config(a.config, probe, world, /*cuda_available=*/false, {}, nullptr, kPlanFiles).device == "cpu";
  } catch (const ConfigError&) {
  }
  if (!is_auto) return on_cuda;
  std::optional<RunConfig> on_cpu;
  try {
    on_cpu = load_config(a.config, ov, world, /*cuda_available=*/false, {}, nullptr, kPlanFiles);
  } catch (const ConfigError&) {  // it needs cuda (bf16, nccl)
  }
  const bool wants_cuda = !on_cpu || bf16_precision(on_cuda.precision) || on_cpu->attention == "flash2";
  *assumed = fmt::format("device auto: planned for {} ({}; --device cpu|cuda to choose)",
                         wants_cuda ? "cuda (an H200)" : "cpu",
                         wants_cuda ? "the config asks for bf16, flash2 or nccl" : "the config runs on the CPU");
  return wants_cuda ? on_cuda : *on_cpu;
}

/// trainer --plan: prints rank 0's plan (and every rank's where they differ). Returns the exit code.
/// ", optimizer in_backward + in_gemm (N of M products: those of >= K elements)" (the plan's config line).
std::string in_gemm_summary(const RunConfig& cfg) {
  const auto [fused, all] = in_gemm_fused_products(ParamLayout(model_dims(cfg.model)),
                                                   cfg.optimizer.in_gemm_min_elements);
  return fmt::format(", optimizer in_backward + in_gemm ({} of {} products{})", fused, all,
                     cfg.optimizer.in_gemm_min_elements > 0
                         ? fmt::format(": those of >= {} elements", cfg.optimizer.in_gemm_min_elements)
                         : "");
}

/// " at KEY (rank 0 has A, rank R has B)" for the first key where the resolved configs `a` (rank 0's) and `b` (rank
/// r's) differ (nlohmann's json::diff, RFC 6902 paths, as check_resume reads them), values cut to 120 characters;
/// "" when they are equal.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, int r) {
  const nlohmann::json ops = nlohmann::json::diff(a, b);
  if (ops.empty()) return "";
  const std::string path = ops[0].value("path", "");
  std::string key = path.empty() ? "the top" : path.substr(1);
  std::replace(key.begin(), key.end(), '/', '.');
  const nlohmann::json::json_pointer ptr(path);
  auto shown = [&ptr](const nlohmann::json& j) {
    if (!j.contains(ptr)) return std::string("no such key");
    const std::string t = j[ptr].dump();
    return t.size() > 120 ? t.substr(0, 117) + "..." : t;
  };
  return fmt::format(" at {} (rank 0 has {}, rank {} has {})", key, shown(a), r, shown(b));
}

int run_plan(const RunConfig& cfg, int world, const std::string& assumed, bool as_json, bool fit,
             double device_memory_gib, const std::string& gpu_arg) {
  // A cuda plan over several ranks resolves parallel.comm as on a cluster's build (with NCCL); a build without it
  // would run them over mpi (resolve_comm), at another communication time: say so beside the plan
  const std::string comm_note =
      cfg.device == "cuda" && world > 1 && cfg.parallel.comm == "nccl" && !build::kHaveNccl
          ? "parallel.comm: planned as nccl, as on a build with NCCL; this trainer was built without NCCL, so it "
            "would run these ranks over mpi (--set parallel.comm=mpi plans that)"
          : "";
  // A data-parallel or sharded config planned on one rank (no --world-size, no mpirun): its per-rank numbers are
  // those of one process holding everything, so say how to plan the ranks it is meant for
  const std::string world_note =
      world == 1 && cfg.parallel.strategy != "none"
          ? fmt::format("planned for 1 rank (parallel.strategy {} shares the work over several: --world-size N, or "
                        "mpirun -np N, plans N)", cfg.parallel.strategy)
          : "";
  CONFIG_CHECK(device_memory_gib == 0 || cfg.device == "cuda", "--device-memory applies to a cuda plan (the cpu "
               "plan compares with this host's MemAvailable)");
  CONFIG_CHECK(gpu_arg.empty() || cfg.device == "cuda", "--gpu applies to a cuda plan (this plan's device is {})",
               cfg.device);
  const std::string gpu = gpu_arg.empty() ? known_gpus().front().name : gpu_arg;
  std::vector<Plan> plans;
  std::vector<nlohmann::json> js;
  bool differ = false;
  // Ranks 0, 1 and the last first: every strategy gives the ranks between the first and the last the same shapes
  // (equal shards; only the last could hold a shorter one), so when those three agree the plan is every rank's.
  // Otherwise every rank is planned and shown.
  auto plan_rank = [&](int r) {
    plans.push_back(make_plan(cfg, world, r, gpu));
    if (device_memory_gib > 0) plans.back().device_memory_bytes = size_t(device_memory_gib * double(1ull << 30));
    js.push_back(plans.back().to_json());
    js.back().erase("rank");
    differ = differ || js.back() != js.front();
  };
  std::vector<int> probe{0};
  if (world > 1) probe.push_back(1);
  if (world > 2) probe.push_back(world - 1);
  for (int r : probe) plan_rank(r);
  if (differ) {
    plans.clear(), js.clear(), differ = false;
    for (int r = 0; r < world; ++r) plan_rank(r);
  }
  // On the cpu the host is the device: the largest rank's peak times the ranks, were they all on this host (a
  // bare mpirun), against MemAvailable (the run refuses what does not fit: check_plan_fits_host).
  size_t host_peak = 0;
  for (const Plan& p : plans) host_peak = std::max(host_peak, p.peak_bytes);
  const size_t available = cfg.device == "cpu" ? host_memory_available() : 0;
  const bool host_fits = plan_fits_host(host_peak, world, available);
  // What fits (plan/fit.h): searched where the plan does not fit its memory with the headroom, or with --fit
  const size_t budget = plans[0].device_memory_bytes
                            ? size_t(kFitFraction * double(plans[0].device_memory_bytes))
                            : size_t(kFitFraction * double(available) / std::max(1, world));
  std::optional<FitSearch> search;
  if (budget > 0 && (fit || host_peak > budget)) search = search_fit(cfg, world, budget, gpu, plans);
  // Why the search found nothing, when it did not: the state alone is over the budget, or no activation setting
  // fits. What lowers the state a rank holds: only fsdp shards the weights and gradients (zero1 the AdamW moments
  // alone; ddp nothing), so more ranks help only under fsdp; precision bf16_pure runs on strategy none only
  std::string nothing;
  if (search && search->options.empty()) {
    const std::string& s = cfg.parallel.strategy;
    const std::string more =
        cfg.precision == "bf16_pure"
            ? "a smaller model, or precision bf16 over several ranks with fsdp (bf16_pure runs on strategy none only)"
        : s == "fsdp"  ? "more ranks, or a smaller model"
        : s == "zero1" ? "fsdp over several ranks (zero1 keeps the weights and gradients whole), or a smaller model"
        // with optimizer.in_backward one unit's gradient lives at a time; zero1 (which refuses in_backward) holds
        // all of it: fp32 state 4 + 4 + 8 / N bytes a parameter against 4 + 8, at most 4 fewer
        : s == "none" && cfg.optimizer.in_backward.value_or(false)
            ? "several ranks with fsdp, precision bf16_pure, or a smaller model (zero1 saves at most 4 bytes a "
              "parameter here: it shards the AdamW moments but holds the whole gradient, which "
              "optimizer.in_backward does not)"
        : s == "none" ? "several ranks with fsdp (or zero1, which shards the AdamW moments alone), precision "
                        "bf16_pure, or a smaller model"
                       : "fsdp over several ranks (" + s + " keeps every weight, gradient and AdamW moment whole), "
                         "or a smaller model";
    nothing = search->state_bytes > budget
                  ? fmt::format("the weights, gradients and optimizer state alone take {}, which no activation "
                                "setting lowers ({})", format_bytes(search->state_bytes), more)
                  : fmt::format("no checkpointing policy fits, even at a microbatch of one row ({}, or a shorter "
                                "context)", more);
  }
  if (as_json) {
    nlohmann::json out = plans[0].to_json();
    out["ranks_identical"] = !differ;
    out["ranks_planned"] = plans.size();  // dry runs of ranks (0, 1 and the last stand for all when they agree)
    if (available) {
      out["host_memory_available_bytes"] = available;
      out["fits_host"] = host_fits;
    }
    if (!assumed.empty()) out["device_note"] = assumed;
    if (!comm_note.empty()) out["comm_note"] = comm_note;
    if (!world_note.empty()) out["world_note"] = world_note;
    if (differ) {
      out["per_rank"] = nlohmann::json::array();
      for (const Plan& p : plans) out["per_rank"].push_back(p.to_json());
    }
    if (search) {
      out["fit"] = search->to_json();
      if (!nothing.empty()) out["fit"]["nothing"] = nothing;
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (!assumed.empty()) std::cout << assumed << "\n";
  if (!comm_note.empty()) std::cout << comm_note << "\n";
  if (!world_note.empty()) std::cout << world_note << "\n";
  std::cout << "config: " << cfg.name << ", model " << (cfg.model.preset.empty() ? "custom" : cfg.model.preset)
            << fmt::format(" (d_model {}, {} layers, context {}), batch {}, microbatch {}, precision {}, attention {}, "
                           "checkpointing {}, phase {}{}\n",
                           cfg.model.d_model, cfg.model.num_layers, cfg.model.context_length, cfg.data.batch_size,
                           cfg.data.microbatch_size, cfg.precision,
                           cfg.attention + (cfg.deterministic && cfg.device == "cuda" ? " (deterministic)" : ""),
                           cfg.checkpointing.policy,
                           cfg.bench.phase,
                           !cfg.optimizer.in_backward.value_or(false) ? ""
                           : !cfg.optimizer.in_gemm.value_or(false)   ? ", optimizer in_backward"
                               : in_gemm_summary(cfg));
  if (!differ) {
    if (world > 1) std::cout << fmt::format("(ranks 0..{} have the same plan; rank 0 shown)\n", world - 1);
    std::cout << plans[0].table();
  } else {
    for (const Plan& p : plans) std::cout << p.table() << "\n";
  }
  if (available)
    std::cout << fmt::format("host memory available {}: {} x {} rank(s) on this host {}\n", format_bytes(available),
                             format_bytes(host_peak), world, host_fits ? "fits" : "DOES NOT FIT");
  if (search) {
    std::cout << fmt::format(
        "\nwhat fits in {} a rank ({:.0f}% of {}{}), {} dry run{}, fastest first:\n", format_bytes(budget),
        100 * kFitFraction,
        plans[0].device_memory_bytes ? format_bytes(plans[0].device_memory_bytes) : format_bytes(available),
        plans[0].device_memory_bytes
            ? " of device memory; the rest for the CUDA context, cuBLAS, NCCL and the allocator's rounding"
            : fmt::format(" available on this host / {} rank(s)", world),
        search->plans, search->plans == 1 ? "" : "s");
    if (!nothing.empty()) std::cout << "  nothing: " << nothing << "\n";
    for (const FitOption& o : search->options) {
      std::string sets;
      for (const std::string& kv : o.sets) sets += fmt::format(" --set '{}'", kv);
      if (sets.empty()) sets = " (nothing to set)";
      std::cout << fmt::format("  {:>10}  {:>10}  {}:{}\n", format_seconds(o.time_s, 3), format_bytes(o.peak_bytes),
                               o.what, sets);
    }
  }
  return 0;
}

void setup_logging(int rank, bool all_ranks) {
  auto logger = spdlog::stderr_color_mt(fmt::format("{}", rank));
  logger->set_pattern("[%T.%e] [r%n] [%l] %v");
  logger->set_level(rank == 0 || all_ranks ? spdlog::level::info : spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// Who ends the run's outputs on rank 0: the main thread or the failure-notice listener (a rank > 0 stopped the job:
// MpiSession::listen_for_failures). The first to claim the end writes (or puts back) the record; the other leaves it
// alone, and so does the fatal hook once the listener has it.
enum class Ender : int { none, main_thread, listener };
std::atomic<int> g_ender{int(Ender::none)};

bool claim_end(Ender who) {
  int none = int(Ender::none);
  return g_ender.compare_exchange_strong(none, int(who)) || none == int(who);
}

/// How much longer than parallel.comm_timeout_s a rank > 0 whose failure rank 0 may read only at the end of its
/// run (MpiSession::report_end, await_ends) waits for rank 0's abort: rank 0's own end after its job may take that
/// long.
constexpr double kEndAbortMarginS = 10;

/// The jobs whose ranks end together (train and collective_bench end in a collective every rank joins): the ones
/// with the end-of-run agreement (MpiSession::report_end, await_ends).
bool ranks_end_together(const RunConfig& cfg) { return cfg.job == "train" || cfg.job == "collective_bench"; }

/// Seconds a rank > 0 that failed gives rank 0 to record it and abort the job (hand_failure_to_rank_0): 3, or where
/// rank 0 reads a notice it could not take at once at the end of its run (train and collective_bench, whose ranks
/// end together, with rank 0's listener: MPI_THREAD_MULTIPLE) parallel.comm_timeout_s + kEndAbortMarginS, so that a
/// failure near the end of the job does not abort rank 0 before it has written its record. Set once the config is
/// known.
double g_hand_wait_s = 3;

/// A rank > 0 whose failure rank 0 has (a notice, or its end report): waits (at most `seconds`) while rank 0 records
/// it and aborts the job; SIGTERM back to its default, so that mpirun's SIGTERM (that abort) ends this rank instead of
/// being taken for an interrupt. Returns after the wait.
void wait_for_rank_0_abort(double seconds) {
  std::signal(SIGTERM, SIG_DFL);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

/// A rank > 0 that stops the job on its own: tells rank 0 (a failure notice: exit code, message) and waits up to
/// g_hand_wait_s for rank 0 to record it and abort the job; after the wait the caller goes on (rank 0 could not hear
/// or has ended).
void hand_failure_to_rank_0(const MpiSession& mpi, int code, const std::string& message) {
  std::signal(SIGTERM, SIG_DFL);  // before the notice: rank 0 may abort at once
  mpi.notify_failure(code, message);
  wait_for_rank_0_abort(g_hand_wait_s);
}

/// For a thread that lost the end to the listener: it aborts the job in a moment (MPI_Abort); wait for that.
[[noreturn]] void wait_for_abort(int code) {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  // A Ctrl-C (or mpirun.sh's SIGUSR1) while MPI, CUDA and the config start is held until the job is known: a train
  // job then stops after its first step with its record, anything else takes the signal's default action below
  install_early_interrupt_handlers();
  MpiSession mpi(&argc, &argv);  // MPI_Init_thread; finalises on scope exit
  const int rank = mpi.rank(), world = mpi.size();
  test_pause("TRAINER_TEST_STARTUP_PAUSE_S", "while starting", /*early=*/true);  // a test's window into the start-up

  // ---- 1. arguments and config: every problem is one line on stderr and exit code 2, before any output ----------
  Args args;
  RunConfig cfg;
  std::vector<std::string> warnings;  // from resolving the config; logged on rank 0 once logging is set up
  std::string error, plan_assumed;
  int plan_world = world;
  // A test's window between the ranks' reads of the config (init.resume's 'latest' among them): the last rank
  // starts reading it late, and rank 0 says when it has read it
  if (world > 1 && rank == world - 1)
    test_pause("TRAINER_TEST_RESOLVE_PAUSE_S", "before reading the config", /*early=*/true);
  try {
    args = parse_args(argc, argv);
    // under mpirun the ranks are the plan's (and the printed config's) world; a --world-size that says otherwise is
    // one of two answers
    CONFIG_CHECK(args.help || args.version || world == 1 || args.world_size == 0 || args.world_size == world,
                 "--world-size {} but mpirun started {} ranks: drop --world-size (mpirun's {} are taken) or run "
                 "without mpirun", args.world_size, world, world);
    if (args.plan && !args.help && !args.version) {
      plan_world = args.world_size > 0 ? args.world_size : world;
      cfg = load_plan_config(args, plan_world, &plan_assumed);
      check_host_memory(cfg, plan_world, 1, /*dry_run=*/true);  // before the dry run allocates its bookkeeping
    } else if (!args.help && !args.version) {
      // --print-config, as --plan, may be shown a cluster's config (--world-size N: resolved for N ranks): its files
      // are checked where they exist here
      cfg = load_config(args.config, args.overrides, args.world_size > 0 ? args.world_size : world, cuda_available(),
                        HostInfo{mpi.local_size(), cuda_device_count(), build::kHaveNccl}, &warnings,
                        args.print_config ? FileChecks::present : FileChecks::all);
      CONFIG_CHECK(args.print_config || cfg.device != "cuda" || cuda_available(),
                   "device: 'cuda' was asked for but {}", TRAINER_HAVE_CUDA_BUILD
                       ? "no CUDA device is visible"
                       : "this trainer was built without CUDA (no nvcc at build time, or -DTRAINER_CUDA=OFF)");
      if (!args.print_config && cfg.output.results) {  // a live run's record is not taken over
        check_record_not_in_use(*cfg.output.results, "output.results");
        if (rank == 0) lock_record_path(*cfg.output.results, "output.results");  // nor one still starting
      }
      if (!args.print_config && cfg.job == "train" && cfg.output.checkpoint && rank == 0)
        check_checkpoint_dir_not_in_use(*cfg.output.checkpoint);  // nor a checkpoint directory another run writes
      if (!args.print_config && cfg.job == "train")  // before anything is allocated (plan/host_memory.h)
        check_host_memory(cfg, world, mpi.local_size(), /*dry_run=*/false);
      if (!args.print_config && cfg.job == "collective_bench")
        check_collective_host_memory(cfg, world, mpi.local_size());
    }
  } catch (const ConfigError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = fmt::format("unexpected error while reading the config: {}", e.what());
  }
  if (world > 1 && rank == 0 && std::getenv("TRAINER_TEST_RESOLVE_PAUSE_S"))
    std::fprintf(stderr, "test hook TRAINER_TEST_RESOLVE_PAUSE_S: rank 0 has read the config\n");
  // Every rank reaches this point; agree on whether all configs loaded, then that they are identical. (A rank that
  // does not arrive within the timeout ends the job with a message: MpiSession's start-up agreements.)
  const double startup_timeout_s =
      error.empty() ? cfg.parallel.startup_timeout_s : RunConfig{}.parallel.startup_timeout_s;
  const int bad_rank = mpi.first_failing_rank(!error.empty(), startup_timeout_s);
  if (bad_rank >= 0) {  // one line, from rank 0, with the first failing rank's message
    const std::string message = world > 1 ? mpi.text_from(bad_rank, error, startup_timeout_s) : error;
    if (rank == 0)
      std::fprintf(stderr, "trainer: error: %s%s\n", world > 1 ? fmt::format("[rank {}] ", bad_rank).c_str() : "",
                   message.c_str());
    return 2;
  }
  if (args.help || args.version || args.print_config || args.plan || cfg.job != "train")
    restore_early_interrupt_handlers();  // only the train job stops after a step; a signal held so far acts now
  if (args.help) {
    if (rank == 0) std::cout << help_text();
    return 0;
  }
  if (args.version) {
    if (rank == 0)
      std::cout << "trainer " << build::kVersion << " (" << build::kGit << ")\n"
                << "CUDA: "
                << (TRAINER_HAVE_CUDA_BUILD ? "built in" : "absent (built without nvcc, or with -DTRAINER_CUDA=OFF)")
                << "\n"
                << "NCCL: "
                << (build::kHaveNccl        ? "built in (parallel.comm auto is nccl on cuda with a GPU per rank)"
                    : TRAINER_HAVE_CUDA_BUILD ? fmt::format("absent: {}; parallel.comm auto resolves to mpi",
                                                            build::kNoNcclHint)
                                              : std::string("absent (not used: no CUDA in this build; parallel.comm "
                                                            "auto is mpi)"))
                << "\n";
    return 0;
  }
  const nlohmann::json resolved = cfg;
  if (const int r = mpi.first_rank_differing(resolved.dump(), startup_timeout_s); r >= 0) {
    // rank r's config to rank 0 (collective), which names the first key that differs
    const std::string theirs = mpi.text_from(r, resolved.dump(), startup_timeout_s);
    if (rank == 0) {
      std::string where;
      try {
        where = first_difference(resolved, nlohmann::json::parse(theirs), r);
      } catch (const nlohmann::json::exception&) {  // cut at 64 KiB: no key, the line without it
      }
      std::fprintf(stderr, "trainer: error: the resolved config of rank %d differs from rank 0's%s (same file and "
                   "--set on every rank?)\n", r, where.c_str());
    }
    return 2;
  }
  if (args.print_config) {
    if (rank == 0) std::cout << resolved.dump(2) << "\n";
    return 0;
  }
  if (args.plan) {
    if (rank != 0) return 0;
    try {
      return run_plan(cfg, plan_world, plan_assumed, args.json, args.fit, args.device_memory_gib, args.gpu);
    } catch (const ConfigError& e) {
      std::fprintf(stderr, "trainer: error: %s\n", e.what());
      return 2;
    }
  }

  // ---- 2. run the job -----------------------------------------------------------------------------------------
  ignore_broken_pipe();  // from here a closed stdout / stderr must not end the run with its record left "running"
  setup_logging(rank, args.log_all_ranks);
  if (rank == 0)
    for (const std::string& w : warnings) spdlog::warn("{}", w);
  const std::string results_path = cfg.output.results ? *cfg.output.results : default_results_path(cfg.name);
  nlohmann::json record = {{"schema", "trainer.result/1"},
                           {"status", "ok"},
                           {"error", nullptr},
                           {"job", cfg.job},
                           {"name", cfg.name},
                           {"started", now_iso()},
                           {"config", resolved},
                           {"inputs", input_files(cfg)},
                           {"world_size", world},
                           {"version", build::kVersion},
                           {"git", build::kGit},
                           {"warnings", warnings}};  // the config's, logged above (a resume's differences)
  // The record exists from here on, marked "running" (atomically, replacing any earlier record of this name), so an
  // older "ok" record never looks like this run's; the end of main() replaces it.
  const std::filesystem::path results_dir = std::filesystem::absolute(results_path).parent_path();
  const std::filesystem::path created_dir = first_missing_dir(results_dir);  // what the marker creates ("": none)
  const auto write_running_marker = [&] {
    nlohmann::json running = record;
    running["status"] = "running";
    running["pid"] = int64_t(::getpid());
    running["machine"] = machine_info("");
    write_json_atomic(results_path, running);
  };
  // What the path held before (an earlier record, a symlink's target, /dev/null), put back if the run ends without a
  // record (kept in memory only).
  std::optional<PriorOutput> prior;
  std::string marker_error;  // rank 0: the marker's write failed (a full disk): the run stops before its job
  if (rank == 0) {
    prior.emplace(results_path);
    try {
      write_running_marker();
    } catch (const std::exception& e) {
      marker_error = e.what();
    }
  }
  // Bad input found once the job started ends without a record: what output.results held is put back, and the
  // directories this run made (for the record; for the checkpoints' .lock, when this run holds that lock) are removed
  // while they hold nothing else.
  const auto end_without_record = [&] {
    prior->restore();
    remove_new_checkpoint_dir();  // first: its .lock may be all that keeps a directory both made non-empty
    remove_created_dirs(results_dir, created_dir);
  };
  // A fatal library error (a collective past parallel.comm_timeout_s, a CUDA or NCCL failure) aborts from wherever it
  // happens: the record then says "error" with its message instead of staying "running". On rank 0 the hook writes it
  // (unless the listener below has claimed the end: a rank > 0's failure is being recorded); a rank > 0 sends it to
  // rank 0's listener as a failure notice and gives rank 0 a moment to record it and abort the job.
  if (ranks_end_together(cfg) && mpi.thread_level() == MPI_THREAD_MULTIPLE)
    g_hand_wait_s = cfg.parallel.comm_timeout_s + kEndAbortMarginS;
  static nlohmann::json failed;  // rank 0: a copy made here, read by the hook on whichever thread fails
  static std::string failed_path;
  static const MpiSession* session = &mpi;
  if (rank == 0) {
    failed = record;
    failed["status"] = "error";
    failed["machine"] = machine_info("");
    failed_path = results_path;
    set_fatal_hook([](const std::string& msg) {
      // The listener has it: it writes the record and aborts the job; fatal()'s own abort must not cut it short.
      if (!claim_end(Ender::main_thread)) wait_for_abort(1);
      failed["error"] = msg;
      write_json_atomic(failed_path, failed);
    });
  } else if (world > 1 && mpi.thread_level() == MPI_THREAD_MULTIPLE) {  // (else rank 0 has no listener)
    set_fatal_hook([](const std::string& msg) { hand_failure_to_rank_0(*session, 1, msg); });
  }
  // The train job stops after a step on an interrupt (exit code 4). Installed before the failure listener starts: a
  // file it writes would otherwise install the pending file's handlers at the same moment (core/interrupt.h).
  if (cfg.job == "train") {
    set_interrupt_announce(rank == 0 || args.log_all_ranks);
    install_interrupt_handlers();
  }
  // A rank > 0 that stops the job on its own (bad input only it found, a run error of its own) tells rank 0, which
  // may be blocked in a collective that rank will never join: rank 0 then ends its outputs as for its own failure
  // (bad input: the earlier record put back, exit code 2; else the record with status error or oom), and aborts.
  // A notice that comes once rank 0's main thread has claimed the end is left unreceived for the end-of-run
  // agreement below (await_ends), which records it with rank 0's measurements.
  std::atomic<bool> trace_told{false};  // the train job wrote profile.trace or said why not (RunContext)
  if (rank == 0)
    mpi.listen_for_failures(
        [](int) {
          // Every rank usually finds bad input at once: rank 0's own end, if it comes within a second, speaks instead.
          for (int i = 0; i < 50 && g_ender.load() == int(Ender::none); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          return claim_end(Ender::listener);
        },
        [&](int from, int code, const std::string& msg) {
          set_fatal_hook(nullptr);
          if (code == 2) {
            std::fprintf(stderr, "trainer: error: rank %d: %s\n", from, msg.c_str());
            std::fflush(stderr);
            end_without_record();
          } else {
            failed["status"] = code == 3 ? "oom" : "error";
            failed["error"] = fmt::format("rank {}: {}", from, msg);
            if (cfg.profile.trace && !trace_told.load())  // its gather is a collective the failed rank never joins
              spdlog::warn("profile.trace: no trace written: rank {} failed before the run's end", from);
            try {
              write_json_atomic(failed_path, failed);
              spdlog::error("rank {} failed: {}; result record: {} (status {}); aborting all {} ranks", from, msg,
                            failed_path, failed["status"].get<std::string>(), world);
            } catch (const std::exception& e) {
              spdlog::error("rank {} failed: {}; the result record could not be written: {}", from, msg, e.what());
            }
            spdlog::default_logger()->flush();
          }
          MPI_Abort(MPI_COMM_WORLD, code);
        });
  int code = 0;
  std::optional<Plan> plan;
  std::string plan_gpu;  // whose rates the plan's step time assumes (known_gpus)
  const auto t0 = std::chrono::steady_clock::now();
  MemoryTimeline timeline;  // attached to the job's backend only with profile.memory_timeline
  try {
    if (!marker_error.empty())  // a run whose record cannot be written would train for nothing
      throw RuntimeError(fmt::format("the result record could not be marked running, so the job did not start: {}",
                                     marker_error));
    RunContext ctx{rank, world, mpi.local_rank(), mpi.local_size(),
                   cfg.profile.memory_timeline ? &timeline : nullptr};
    ctx.trace_told = &trace_told;
    if (cfg.job == "train") {  // the prediction goes into the record beside the measurement (and into an OOM record)
      try {
        // at the rates of this rank's GPU where the planner knows it (an H100 80GB), else an H200's
        plan_gpu = cfg.device == "cuda" ? gpu_of_device_name(cuda_device_name(mpi.local_rank())) : "h200";
        plan = make_plan(cfg, world, rank, plan_gpu);
        ctx.plan = &*plan;
      } catch (const ConfigError&) {
        throw;
      } catch (const std::exception& e) {  // a planner failure costs the prediction, not the run
        spdlog::warn("plan: the dry run failed ({}); the record carries no prediction", e.what());
      }
      if (plan && cfg.device == "cpu") check_plan_fits_host(plan->peak_bytes, plan->peak_phase, mpi.local_size());
    }
    nlohmann::json part;
    if (cfg.job == "train") part = run_train(cfg, ctx);
    else if (cfg.job == "collective_bench") part = run_collective_bench(cfg, ctx);
    else if (cfg.job == "attention_bench") part = run_attention_bench(cfg, ctx);
    else throw ConfigError(fmt::format("job: '{}' is not implemented", cfg.job));
    record.update(part);
    if (plan && record.contains("memory")) record["memory"]["predicted"] = plan->predicted_json();
    if (plan && cfg.device == "cuda" && record.contains("timing") && record["timing"].is_object()) {
      // beside timing.step (and, over several ranks, timing.comm / comm_exposed: this rank's)
      record["timing"]["predicted"] = {{"step_ms", plan->time_s * 1e3}, {"gpu", plan_gpu}};
      if (world > 1) {
        record["timing"]["predicted"]["comm_ms"] = plan->comm_s * 1e3;
        record["timing"]["predicted"]["comm_exposed_ms"] = plan->comm_exposed_s * 1e3;
      }
    }
    if (record.contains("interrupted") && !record["interrupted"].is_null()) {
      record["status"] = "interrupted";
      record["error"] = fmt::format("interrupted by {} after step {} of {}",
                                    record["interrupted"]["signal"].get<std::string>(),
                                    record["interrupted"]["steps_done"].get<int>(),
                                    record["interrupted"]["steps_planned"].get<int>());
      code = 4;
    }
  } catch (const OutOfMemory& e) {
    record["status"] = "oom";
    record["error"] = e.what();
    if (plan) record["plan"] = plan->to_json();
    spdlog::error("out of memory: {}", e.what());
    code = 3;
  } catch (const ConfigError& e) {
    // Bad input found only once the job looked at it (e.g. init.weights that do not fit the model): one line,
    // exit code 2, no record. Usually every rank finds it; rank 0 speaks. A rank > 0 tells rank 0 and waits a moment:
    // rank 0 (for its own failure or for this notice) puts the paths back and aborts everyone, so this rank's line
    // never shows; if rank 0 could not (it ended already, no MPI_THREAD_MULTIPLE), this rank's line is the one.
    if (rank == 0 && !claim_end(Ender::main_thread)) wait_for_abort(2);  // a rank > 0's failure is being recorded
    set_fatal_hook(nullptr);
    mpi.stop_listening();
    if (rank > 0 && world > 1) {  // rank 0 speaks and aborts the job (see listen_for_failures above); else this rank
      hand_failure_to_rank_0(mpi, 2, e.what());
      std::fprintf(stderr, "trainer: error: rank %d: %s\n", rank, e.what());
    } else {
      std::fprintf(stderr, "trainer: error: %s\n", e.what());
    }
    if (rank == 0) end_without_record();  // no record for bad input: the paths as they were
    spdlog::shutdown();
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
  } catch (const std::exception& e) {
    // A run that failed part-way keeps what it measured until then (the loss curve).
    if (const auto* partial = dynamic_cast<const PartialRunError*>(&e)) record.update(partial->partial);
    record["status"] = "error";
    record["error"] = e.what();
    spdlog::error("run failed: {}", e.what());
    code = 1;
  }
  if (rank == 0 && !claim_end(Ender::main_thread)) wait_for_abort(code == 0 ? 1 : code);
  mpi.stop_listening();
  const int job_code = code;  // how the job ended, before this rank's own work after it
  if (cfg.profile.memory_timeline) {
    // Written here, after the job, so that a run that ran out of memory leaves its log too (its last allocation is
    // logged as failed); the job's backend is gone by now, so its teardown frees are in it as well.
    const std::string path = memory_timeline_path(*cfg.profile.memory_timeline, rank);
    try {
      const std::string text = timeline.to_json(rank, world, record.value("backend", cfg.device));
      write_file_atomic(path, {{text.data(), text.size()}});
      record["profile"]["memory_timeline"] = *cfg.profile.memory_timeline;
      spdlog::info("memory timeline: {} events written to {} (launch/plot_memory.py draws it)",
                   timeline.events().size(), path);
    } catch (const std::exception& e) {
      spdlog::error("the memory timeline could not be written: {}", e.what());
      if (code == 0) {
        record["status"] = "error";
        record["error"] = fmt::format("the memory timeline could not be written: {}", e.what());
        code = 1;
      }
    }
  }
  // The end-of-run agreement: rank 0 writes "ok" (or "interrupted") only once every rank has said that it ended
  // well, so a rank > 0 that fails after its job (its memory timeline cannot be written) is in the record. Only for
  // the jobs whose ranks end together (train and collective_bench end in a collective every rank joins: what is left
  // is each rank's own work after its job). A rank > 0 whose job ended well reports how its run ended, its failure
  // after the job included (the listener leaves these reports alone: rank 0 reads them once its own job is done, so
  // the record keeps its measurements), and after a failure waits for rank 0's abort (the end of this function).
  // Rank 0 waits at most parallel.comm_timeout_s, polling, and stops at the first failure.
  int failed_rank = rank;  // whose failure `code` is
  const bool agreement = world > 1 && ranks_end_together(cfg) && (job_code == 0 || job_code == 4);
  if (agreement && rank > 0) {
    mpi.report_end(code, record["error"].is_string() ? record["error"].get<std::string>() : std::string());
  } else if (agreement && (code == 0 || code == 4)) {
    if (const auto ends = mpi.await_ends(cfg.parallel.comm_timeout_s); !ends.empty()) {
      const MpiSession::RankEnd& e = ends.front();  // the failure, or the first rank that did not answer
      failed_rank = e.rank;
      code = e.code == 3 ? 3 : 1;  // (bad input found after rank 0's job is a failed run: the record is written)
      record["status"] = code == 3 ? "oom" : "error";
      record["error"] = e.code == -1 ? fmt::format("rank {} did not report the end of its run within "
                                                   "parallel.comm_timeout_s = {} s",
                                                   e.rank, cfg.parallel.comm_timeout_s)
                                     : fmt::format("rank {}: {}", e.rank, e.message);
      if (ends.size() > 1) record["error"] = fmt::format("{} ({} ranks did not report)",
                                                         record["error"].get<std::string>(), ends.size());
      spdlog::error("end of run: {}", record["error"].get<std::string>());
    }
  }
  set_fatal_hook(nullptr);
  record["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  record["machine"] = machine_info(record.value("backend", std::string()));
  if (rank == 0 && !marker_error.empty()) {  // the job never started: no second try at the record (the failed atomic
    remove_created_dirs(results_dir, created_dir);  // write left the path as it was), nor a directory made for it
  } else if (rank == 0) {
    try {
      write_json_atomic(results_path, record);
      spdlog::info("result record: {} (status {})", results_path, record["status"].get<std::string>());
    } catch (const std::exception& e) {  // the checks passed but the write failed (disk full, a device error)
      spdlog::error("the result record could not be written: {}", e.what());
      if (code == 0) {
        code = 1;
        record["status"] = "error";  // for the line below: the run failed after all
      }
    }
  }
  if (code != 0 && world > 1 && rank == 0)  // Open MPI then waits for its kill timeout before it returns: say so
    if (const char* t = std::getenv("OMPI_MCA_odls_base_sigkill_timeout"); t && std::atoi(t) > 2)
      spdlog::info("exit code {}: mpirun may take up to {} s more to return (twice "
                   "OMPI_MCA_odls_base_sigkill_timeout = {} s)", code, 2 * std::atoi(t), t);
  if (code != 0 && code != 4 && world > 1) {  // interrupted: every rank left the loop after the same step
    // The other ranks may be blocked in a collective this rank will never join: stop them all. Ranks other than 0
    // wait a moment first, so that rank 0, if it failed as well, has written its record.
    spdlog::critical("rank {} failed ({}); aborting all {} ranks", failed_rank, record["status"].get<std::string>(),
                     world);
    spdlog::shutdown();
    if (rank != 0 && agreement) {  // reported as its end: rank 0 reads it once its own job is done
      wait_for_rank_0_abort(cfg.parallel.comm_timeout_s + kEndAbortMarginS);
    } else if (rank != 0) {  // rank 0 records the failure (unless it ended already) and aborts the job
      hand_failure_to_rank_0(mpi, code, record["error"].is_string() ? record["error"].get<std::string>()
                                                                     : record["status"].get<std::string>());
    }
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  spdlog::shutdown();
  return code;
}
