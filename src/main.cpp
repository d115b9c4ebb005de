// trainer: trains the CS336 basics Transformer LM and measures how fast and how lean training can be made.
//
//   trainer [CONFIG.json] [--set key.path=value ...] [--log-all-ranks]
//   trainer --print-config [CONFIG.json] [--set ...]  |  trainer --help  |  trainer --version
//   mpirun -np 2 trainer configs/small.json --set parallel.strategy=ddp_bucketed
//
// Exit codes: 0 ok; 2 bad input (one line on stderr, nothing written); 1 the run failed (record with status
// "error"; a diverged training run keeps its per-step losses up to the failing step); 3 out of memory (record with
// status "oom").
#include <mpi.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <thread>

#include "backend/backend.h"
#include "build_info.h"
#include "config/config.h"
#include "core/memory.h"
#include "dist/bootstrap.h"
#include "git_info.h"
#include "io/result_record.h"
#include "jobs/job.h"

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
};

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
  return a;
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

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);  // MPI_Init_thread; finalises on scope exit
  const int rank = mpi.rank(), world = mpi.size();

  // ---- 1. arguments and config: every problem is one line on stderr and exit code 2, before any output ----------
  Args args;
  RunConfig cfg;
  std::string error;
  try {
    args = parse_args(argc, argv);
    if (!args.help && !args.version) {
      cfg = load_config(args.config, args.overrides, world, cuda_available());
      CONFIG_CHECK(args.print_config || cfg.device != "cuda" || cuda_available(),
                   "device: 'cuda' was asked for but {}", TRAINER_HAVE_CUDA_BUILD
                       ? "no CUDA device is visible" : "this trainer was built without CUDA (no nvcc at build time)");
      // NCCL needs a GPU of its own per rank; ranks sharing one would fail or hang in its set-up (issue 16).
      CONFIG_CHECK(args.print_config || cfg.parallel.comm != "nccl" || mpi.local_size() <= cuda_device_count(),
                   "parallel.comm: 'nccl' needs one GPU per rank, but {} ranks on this host share {} GPU(s); use "
                   "parallel.comm=mpi", mpi.local_size(), cuda_device_count());
    }
  } catch (const ConfigError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = fmt::format("unexpected error while reading the config: {}", e.what());
  }
  // Every rank reaches this point; agree on whether all configs loaded, then that they are identical.
  const int bad_rank = mpi.first_failing_rank(!error.empty());
  if (bad_rank >= 0) {
    if (!error.empty() && (rank == 0 || rank == bad_rank))
      std::fprintf(stderr, "trainer: error: %s%s\n", world > 1 ? fmt::format("[rank {}] ", rank).c_str() : "",
                   error.c_str());
    else if (rank == 0)
      std::fprintf(stderr, "trainer: error: rank %d could not load its config (see its message)\n", bad_rank);
    return 2;
  }
  if (args.help) {
    if (rank == 0) std::cout << help_text();
    return 0;
  }
  if (args.version) {
    if (rank == 0) std::cout << "trainer " << build::kVersion << " (" << build::kGit << ")\n";
    return 0;
  }
  const nlohmann::json resolved = cfg;
  if (const int r = mpi.first_rank_differing(resolved.dump()); r >= 0) {
    if (rank == 0)
      std::fprintf(stderr, "trainer: error: the resolved config of rank %d differs from rank 0's (same file and "
                   "--set on every rank?)\n", r);
    return 2;
  }
  if (args.print_config) {
    if (rank == 0) std::cout << resolved.dump(2) << "\n";
    return 0;
  }

  // ---- 2. run the job -----------------------------------------------------------------------------------------
  setup_logging(rank, args.log_all_ranks);
  const std::string results_path = cfg.output.results ? *cfg.output.results : default_results_path(cfg.name);
  nlohmann::json record = {{"schema", "trainer.result/1"},
                           {"status", "ok"},
                           {"error", nullptr},
                           {"job", cfg.job},
                           {"name", cfg.name},
                           {"started", now_iso()},
                           {"config", resolved},
                           {"world_size", world},
                           {"version", build::kVersion},
                           {"git", build::kGit}};
  int code = 0;
  const auto t0 = std::chrono::steady_clock::now();
  MemoryTimeline timeline;  // attached to the job's backend only with profile.memory_timeline
  try {
    const RunContext ctx{rank, world, mpi.local_rank(), mpi.local_size(),
                         cfg.profile.memory_timeline ? &timeline : nullptr};
    nlohmann::json part;
    if (cfg.job == "train") part = run_train(cfg, ctx);
    else if (cfg.job == "collective_bench") part = run_collective_bench(cfg, ctx);
    else if (cfg.job == "attention_bench") part = run_attention_bench(cfg, ctx);
    else throw ConfigError(fmt::format("job: '{}' is not implemented", cfg.job));
    record.update(part);
  } catch (const OutOfMemory& e) {
    record["status"] = "oom";
    record["error"] = e.what();
    spdlog::error("out of memory: {}", e.what());
    code = 3;
  } catch (const ConfigError& e) {
    // Bad input found only once the job looked at it (e.g. init.weights that do not fit the model): one line,
    // exit code 2, no record.
    if (rank == 0 || world == 1) std::fprintf(stderr, "trainer: error: %s\n", e.what());
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
  record["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  record["machine"] = machine_info(record.value("backend", std::string()));
  if (rank == 0) {
    try {
      write_json_atomic(results_path, record);
      spdlog::info("result record: {} (status {})", results_path, record["status"].get<std::string>());
    } catch (const std::exception& e) {  // the checks passed but the write failed (disk full, a device error)
      spdlog::error("the result record could not be written: {}", e.what());
      if (code == 0) code = 1;
    }
  }
  if (code != 0 && world > 1) {
    // The other ranks may be blocked in a collective this rank will never join: stop them all. Ranks other than 0
    // wait a moment first, so that rank 0, if it failed as well, has written its record.
    spdlog::critical("rank {} failed ({}); aborting all {} ranks", rank, record["status"].get<std::string>(), world);
    spdlog::shutdown();
    if (rank != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  spdlog::shutdown();
  return code;
}
