// Issue 18 items 2 and 3 below the command line: the interrupt flag (core/interrupt.h), the host-memory lower bound
// (plan/host_memory.h) and parallel.comm resolution in a build without NCCL. The command-line behaviour (exit codes,
// records, one-line errors) is tested in tests/cli/test_robustness.py.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "config/config.h"
#include "core/errors.h"
#include "core/interrupt.h"
#include "dist/mpi_communicator.h"
#include "plan/host_memory.h"

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using trainer::ConfigError;
using trainer::HostInfo;
using trainer::RunConfig;

TEST_CASE("interrupt: the first signal is recorded, a duplicate within 250 ms is the same request", "[interrupt]") {
  trainer::install_interrupt_handlers();
  trainer::reset_interrupt();
  CHECK(trainer::interrupt_signal() == 0);
  REQUIRE(std::raise(SIGUSR1) == 0);  // handled: the process goes on
  CHECK(trainer::interrupt_signal() == SIGUSR1);
  CHECK(std::string(trainer::interrupt_signal_name(SIGUSR1)) == "SIGUSR1");
  REQUIRE(std::raise(SIGUSR1) == 0);  // the same signal at once: one delivery seen twice, not a second request
  CHECK(trainer::interrupt_signal() == SIGUSR1);
  trainer::reset_interrupt();
  CHECK(trainer::interrupt_signal() == 0);
  std::signal(SIGUSR1, SIG_DFL);  // leave the process as it was (a second signal would now terminate it)
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR2}) std::signal(s, SIG_DFL);
}

namespace {
/// Runs `body` in a forked child (the signal dispositions it sets stay there), which starts from the default actions
/// as a fresh process would (Catch2 has its own handlers); returns the child's wait status.
int in_child(const std::function<void()>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) std::signal(s, SIG_DFL);
    body();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}
}  // namespace

TEST_CASE("interrupt: SIGHUP is an interrupt unless it was ignored (nohup)", "[interrupt]") {
  int st = in_child([] {
    trainer::install_interrupt_handlers();
    std::raise(SIGHUP);
    ::_exit(trainer::interrupt_signal() == SIGHUP ? 0 : 10);
  });
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  st = in_child([] {
    std::signal(SIGHUP, SIG_IGN);
    trainer::install_interrupt_handlers();
    std::raise(SIGHUP);
    ::_exit(trainer::interrupt_signal() == 0 ? 0 : 11);
  });
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(std::string(trainer::interrupt_signal_name(SIGHUP)) == "SIGHUP");
}

TEST_CASE("interrupt: a signal that ends the process removes the pending file; one the train job handles does not",
          "[interrupt]") {
  namespace fs = std::filesystem;
  const fs::path file = fs::temp_directory_path() / ("trainer-pending-" + std::to_string(::getpid()));
  auto make = [&] { std::ofstream(file) << "half"; };
  const std::string path = file.string();

  // No handlers (another job; before the train job installs its own): SIGTERM removes the file, then ends the process.
  make();
  int st = in_child([&] {
    trainer::set_pending_file(path.c_str());
    std::raise(SIGTERM);
  });
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM));
  CHECK_FALSE(fs::exists(file));

  // The train job's handlers installed first, the file named after (a rank's first write at a periodic checkpoint):
  // the first SIGTERM only asks for a stop after the step; a second signal ends the process and removes the file.
  make();
  st = in_child([&] {
    trainer::install_interrupt_handlers();
    trainer::set_pending_file(path.c_str());
    std::raise(SIGTERM);
    if (trainer::interrupt_signal() != SIGTERM || !fs::exists(file)) ::_exit(10);
    std::raise(SIGINT);
    ::_exit(11);  // not reached
  });
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGINT));
  CHECK_FALSE(fs::exists(file));

  // The file named first, the handlers after: they take over (the first signal does not end the process).
  make();
  st = in_child([&] {
    trainer::set_pending_file(path.c_str());
    trainer::install_interrupt_handlers();
    std::raise(SIGINT);
    ::_exit(trainer::interrupt_signal() == SIGINT ? 0 : 12);
  });
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  CHECK(fs::exists(file));

  // An ignored SIGHUP (nohup) stays ignored; a cleared pending file is not removed.
  st = in_child([&] {
    std::signal(SIGHUP, SIG_IGN);
    trainer::set_pending_file(path.c_str());
    std::raise(SIGHUP);
    trainer::clear_pending_file();
    std::raise(SIGTERM);
  });
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM));
  CHECK(fs::exists(file));

  // Two threads write at once (the main thread's checkpoint, the failure listener's record): each file is covered,
  // one thread's clear_pending_file leaves the other's covered, and a thread that exits gives its slot back.
  const fs::path second = file.string() + "-listener", third = file.string() + "-done";
  make();
  std::ofstream(second) << "half";
  std::ofstream(third) << "half";
  st = in_child([&] {
    trainer::set_pending_file(path.c_str());
    for (int i = 0; i < 20; ++i)  // more threads than slots, one after another: each gives its slot back
      std::thread([&] {
        trainer::set_pending_file(third.c_str());
        trainer::clear_pending_file();  // its write ended
      }).join();
    std::atomic<bool> named{false};
    std::thread listener([&] {
      trainer::set_pending_file(second.c_str());
      named = true;
      ::usleep(10'000'000);  // still writing when the signal comes; the signal ends the process long before
      ::_exit(13);
    });
    listener.detach();
    while (!named) std::this_thread::yield();
    std::thread([] { trainer::clear_pending_file(); }).join();  // a thread with nothing pending clears nothing
    std::raise(SIGTERM);
    ::_exit(14);  // not reached: SIGTERM's default action ends the process
  });
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM));
  CHECK_FALSE(fs::exists(file));
  CHECK_FALSE(fs::exists(second));
  CHECK(fs::exists(third));
  fs::remove(third);
}

namespace {
RunConfig model(int num_layers, const std::string& device, const std::string& strategy = "none") {
  RunConfig c;
  c.model.vocab_size = 256;
  c.model.d_model = 64;
  c.model.d_ff = 172;
  c.model.num_layers = num_layers;
  c.device = device;
  c.parallel.strategy = strategy;
  return c;
}
}  // namespace

TEST_CASE("host memory: the lower bound counts bookkeeping per block and the cpu tensors", "[host_memory]") {
  using trainer::host_memory_needed;
  using trainer::kBookkeepingBytesPerBlock;
  // Parameters of the tiny model with L layers, counted independently: 2 V d + L (4 d^2 + 3 d d_ff + 2 d) + d.
  const auto params = [](double L) { return 2.0 * 256 * 64 + L * (4.0 * 64 * 64 + 3.0 * 64 * 172 + 2 * 64) + 64; };
  const auto cpu = host_memory_needed(model(2, "cpu"), 1, 1, false);
  CHECK(cpu.bookkeeping == 2 * kBookkeepingBytesPerBlock);
  CHECK(cpu.tensors == size_t(16 * params(2)));  // fp32 weights, grads, AdamW m and v
  // Two ranks on the host, zero1: weights and grads each, the optimizer state halved, times two ranks.
  const auto z1 = host_memory_needed(model(2, "cpu", "zero1"), 2, 2, false);
  CHECK(z1.tensors == size_t(2 * (8 * params(2) + 8 * params(2) / 2)));
  const auto fsdp = host_memory_needed(model(2, "cpu", "fsdp"), 4, 1, false);
  CHECK(fsdp.tensors == size_t(16 * params(2) / 4));
  // bf16_pure: 2 bytes an element; in_backward: no flat gradients.
  RunConfig pure = model(2, "cpu"), inb = model(2, "cpu");
  pure.precision = "bf16_pure";
  inb.optimizer.in_backward = true;
  CHECK(host_memory_needed(pure, 1, 1, false).tensors == size_t(8 * params(2)));
  CHECK(host_memory_needed(inb, 1, 1, false).tensors == size_t(12 * params(2)));
  pure.optimizer.in_backward = true;
  CHECK(host_memory_needed(pure, 1, 1, false).tensors == size_t(6 * params(2)));
  // On cuda the tensors live on the device; a --plan dry run holds none.
  CHECK(host_memory_needed(model(2, "cuda"), 1, 1, false).tensors == 0);
  CHECK(host_memory_needed(model(2, "cpu"), 1, 1, true).tensors == 0);
}

TEST_CASE("host memory: the check names the key, the bytes needed and the bytes available", "[host_memory]") {
  using trainer::check_host_memory;
  const size_t gib = size_t(1) << 30;
  CHECK_NOTHROW(check_host_memory(model(2, "cpu"), 1, 1, false, gib));
  CHECK_THROWS_WITH(check_host_memory(model(30000000, "cuda"), 1, 1, false, gib),
                    Contains("model.num_layers = 30000000") && Contains("28.61 GiB of host memory") &&
                        Contains("but 1.00 GiB is available"));
  CHECK_THROWS_WITH(check_host_memory(model(30000000, "cpu"), 1, 1, true, gib), Contains("the plan's dry run"));
  RunConfig wide = model(2, "cpu");
  wide.model.d_model = 1 << 20;  // 4 d^2 per block: terabytes of fp32 weights
  CHECK_THROWS_WITH(check_host_memory(wide, 1, 1, false, gib),
                    Contains("model.d_model = 1048576") && Contains("weights, gradients and AdamW state (fp32) on the cpu"));
  CHECK_NOTHROW(check_host_memory(wide, 1, 1, /*dry_run=*/true, gib));
  // A preset no key of which is beyond the largest preset's (10B): the model is named whole (a fresh user's xl on
  // the cpu once blamed model.vocab_size, which xl shares with 10B)
  RunConfig xl = model(2, "cpu");
  xl.model = trainer::preset_model("xl");
  xl.model.preset = "xl";
  CHECK_THROWS_WITH(check_host_memory(xl, 1, 1, false, gib),
                    StartsWith("model.preset = xl: the run needs at least") && !Contains("vocab_size ="));
  xl.model.preset.clear();
  CHECK_THROWS_WITH(check_host_memory(xl, 1, 1, false, gib), StartsWith("model: the run needs at least"));
  CHECK(trainer::host_memory_available() > 0);  // Linux: /proc/meminfo
}

TEST_CASE("host memory: one step's token ids count, in a run and in the plan's dry run", "[host_memory]") {
  using trainer::check_host_memory;
  using trainer::host_memory_needed;
  const size_t gib = size_t(1) << 30;
  RunConfig c = model(2, "cuda");
  c.model.context_length = 64;
  c.data.batch_size = 2000000000;
  const double tokens = 2e9 * 64;
  CHECK(host_memory_needed(c, 1, 1, /*dry_run=*/true).tokens == size_t(4 * tokens));  // the dry run's one array
  CHECK(host_memory_needed(c, 1, 1, false).tokens == size_t(8 * tokens));  // inputs and targets (int32)
  c.device = "cpu";  // and the cpu backend's copy of them and the losses; two ranks on this host, half a batch each
  CHECK(host_memory_needed(c, 2, 2, false).tokens == size_t(20 * tokens / 2 * 2));
  CHECK_THROWS_WITH(check_host_memory(c, 1, 1, true, gib),
                    Contains("data.batch_size = 2000000000: the plan's dry run needs at least 476.84 GiB") &&
                        Contains("for one step's token ids") && Contains("context_length 64"));
  c.data.batch_size = 4;
  c.model.context_length = 100000000;
  CHECK_THROWS_WITH(check_host_memory(c, 1, 1, false, gib), Contains("model.context_length = 100000000"));
}

TEST_CASE("host memory: the weights file counts, read whole by every rank on the host", "[host_memory]") {
  using trainer::check_host_memory;
  using trainer::host_memory_needed;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("trainer_test_host_weights_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / "w.safetensors";
  const size_t mib = size_t(1) << 20;
  std::ofstream(file, std::ios::binary) << std::string(4 * mib, 'w');
  RunConfig c = model(2, "cuda");
  c.init.weights = file.string();
  CHECK(host_memory_needed(c, 1, 1, false).weights_file == 4 * mib);
  CHECK(host_memory_needed(c, 2, 2, false).weights_file == 8 * mib);  // two ranks on this host read it
  CHECK(host_memory_needed(c, 1, 1, /*dry_run=*/true).weights_file == 0);  // --plan reads no weights
  CHECK_NOTHROW(check_host_memory(c, 1, 1, false, 5 * mib));
  CHECK_THROWS_WITH(check_host_memory(c, 2, 2, false, 5 * mib),
                    StartsWith("init.weights: the run needs at least 8.") &&
                        Contains("(init.weights), read whole by each of the 2 ranks on this host") &&
                        Contains("holds 4.0 MiB"));
  c.job = "attention_bench";  // (no model: the file is not read)
  CHECK(host_memory_needed(c, 1, 1, false).weights_file == 0);
  // init.resume's weights, STEP/model.safetensors of the step load_config resolved, count the same way
  c.job = "train";
  c.init.weights.reset();
  c.init.resume = dir.string();
  c.init.resume_step_dir = (dir / "step-00000001").string();
  fs::create_directories(c.init.resume_step_dir);
  fs::rename(file, fs::path(c.init.resume_step_dir) / "model.safetensors");
  CHECK(host_memory_needed(c, 1, 3, false).weights_file == 12 * mib);
  CHECK_THROWS_WITH(check_host_memory(c, 1, 1, false, 3 * mib),
                    StartsWith("init.resume: the run needs at least 4.") &&
                        Contains("for the weights file (init.resume), read whole while the run loads it"));
  fs::remove_all(dir);
}

TEST_CASE("host memory: on the cpu the plan's peak times the host's ranks must fit", "[host_memory]") {
  using trainer::check_plan_fits_host;
  const size_t gib = size_t(1) << 30;
  CHECK_NOTHROW(check_plan_fits_host(gib, "forward", 2, 2 * gib));  // exactly fits
  CHECK_THROWS_WITH(check_plan_fits_host(gib, "backward", 2, 2 * gib - 1),
                    Contains("2.00 GiB of host memory at its peak") && Contains("1.00 GiB a rank x 2") &&
                        Contains("in its backward phase") && Contains("lower data.batch_size"));
  CHECK_NOTHROW(check_plan_fits_host(gib, "forward", 0, gib));  // 0 local ranks reads as 1
}

TEST_CASE("config: parallel.comm in a build without NCCL", "[config]") {
  using trainer::resolve_comm;
  const auto no_nccl = resolve_comm("auto", "cuda", HostInfo{2, 2, /*nccl=*/false});
  CHECK(no_nccl.comm == "mpi");
  CHECK_THAT(no_nccl.warning, Contains("built without NCCL") && Contains("libnccl-dev") && Contains("NCCL_HOME"));
  CHECK(resolve_comm("auto", "cpu", HostInfo{2, 2, false}).warning.empty());
  CHECK(resolve_comm("auto", "cuda", HostInfo{2, 2, true}).comm == "nccl");
  CHECK_THROWS_WITH(resolve_comm("nccl", "cuda", HostInfo{2, 2, false}),
                    Contains("'nccl' is not available") && Contains("use parallel.comm=mpi"));
  CHECK(resolve_comm("mpi", "cuda", HostInfo{2, 2, false}).comm == "mpi");
}

TEST_CASE("host memory: collective_bench counts its largest point's buffers, or the mpi staging on cuda",
          "[host_memory]") {
  using trainer::check_collective_host_memory;
  using trainer::collective_host_bytes;
  const size_t mib = size_t(1) << 20, gib = size_t(1) << 30;
  RunConfig c;
  c.job = "collective_bench";
  c.device = "cpu";
  c.parallel.comm = "mpi";
  c.collective.ops = {"all_reduce"};
  c.collective.sizes_mb = {1, 1000, 10};
  std::string op;
  size_t i = 99;
  CHECK(collective_host_bytes(c, 4, &op, &i) == 1000 * mib);  // the whole array, once (sizes do not add up)
  CHECK(op == "all_reduce");
  CHECK(i == 1);
  // reduce_scatter on the cpu: the array (rounded down to a multiple of 3 elements) and one rank's chunk of it.
  c.collective.ops = {"all_reduce", "reduce_scatter"};
  const size_t elements = 1000 * mib / 4 / 3 * 3;
  CHECK(collective_host_bytes(c, 3, &op) == 4 * elements + 4 * elements / 3);
  CHECK(op == "reduce_scatter");
  c.collective.ops = {"all_gather"};
  CHECK(collective_host_bytes(c, 3) == 4 * elements + 4 * elements / 3);
  // cuda: device buffers; the mpi communicator stages all_gather's output only, nccl nothing on the host. Its pool
  // keeps the 1 MiB point's block (1 MiB rounded down to 3 elements), which the 1000 MiB point cannot reuse.
  c.device = "cuda";
  CHECK(collective_host_bytes(c, 3) == 4 * elements + 4 * (mib / 4 / 3 * 3));
  c.parallel.comm = "nccl";
  CHECK(collective_host_bytes(c, 3) == 0);
  CHECK_NOTHROW(check_collective_host_memory(c, 3, 3, mib));
  // The check: bytes a rank times the ranks on this host against what is available.
  c.device = "cpu";
  c.parallel.comm = "mpi";
  c.collective.ops = {"all_reduce"};
  CHECK_NOTHROW(check_collective_host_memory(c, 2, 2, 2000 * mib));  // exactly fits
  CHECK_THROWS_WITH(check_collective_host_memory(c, 2, 2, 2000 * mib - 1),
                    Contains("collective.sizes_mb[1] = 1000: collective_bench needs at least 1.95 GiB of host "
                             "memory (all_reduce's buffers of 1000.0 MiB a rank x 2 rank(s) on this host)") &&
                        Contains("MemAvailable"));
  c.collective.sizes_mb = {1e9};  // about a PiB, within the 2^56-byte bound of validation
  CHECK_THROWS_WITH(check_collective_host_memory(c, 1, 1, gib), Contains("collective.sizes_mb[0] = 1000000000"));
}


TEST_CASE("host memory: the mpi staging pool keeps every block it added; collective_bench on cuda counts them all",
          "[host_memory]") {
  using trainer::check_collective_host_memory;
  using trainer::collective_host_bytes;
  using trainer::staging_pool_bytes;
  const size_t mib = size_t(1) << 20;
  // The pool on its own: a freed block is reused by best fit, never freed, and an op holds its blocks together.
  CHECK(staging_pool_bytes({{100}, {200}, {50}}) == 300);   // 50 reuses the 100 block
  CHECK(staging_pool_bytes({{200}, {100}, {50}}) == 200);   // all three fit the first block
  CHECK(staging_pool_bytes({{64}, {100, 50}}) == 164);      // 100 is new, 50 takes the 64 block
  CHECK(staging_pool_bytes({{100, 100}, {100}}) == 200);    // two at once
  CHECK(staging_pool_bytes({{0}, {10}}) == 64);             // blocks are at least 64 bytes
  CHECK(staging_pool_bytes({}) == 0);
  RunConfig c;
  c.job = "collective_bench";
  c.device = "cuda";
  c.parallel.comm = "mpi";
  c.collective.ops = {"all_reduce"};
  // A rising sweep adds a block at every size: 1 + 2 + ... + 1024 MiB, not the largest point's 1024 MiB.
  c.collective.sizes_mb = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  std::string op;
  size_t i = 99;
  CHECK(collective_host_bytes(c, 2, &op, &i) == 2047 * mib);
  CHECK(op == "all_reduce");
  CHECK(i == 10);
  // A falling one reuses the first block throughout.
  c.collective.sizes_mb = {1024, 512, 1};
  CHECK(collective_host_bytes(c, 2, &op, &i) == 1024 * mib);
  CHECK(i == 0);
  // Two ops (every size of all_reduce, then every size of reduce_scatter), 4 ranks: all_reduce adds a 1 and a 3 MiB
  // block; reduce_scatter of 1 MiB takes the 1 MiB block for its input and the 3 MiB one for its 0.25 MiB output,
  // of 3 MiB the 3 MiB block and the 1 MiB one for its 0.75 MiB output: 4 MiB, the last block added by all_reduce.
  c.collective.ops = {"all_reduce", "reduce_scatter"};
  c.collective.sizes_mb = {1, 3};
  CHECK(collective_host_bytes(c, 4, &op, &i) == 4 * mib);
  CHECK(op == "all_reduce");
  CHECK(i == 1);
  // 2 ranks, one size: reduce_scatter's input reuses all_reduce's block, its 0.5 MiB output is a new one.
  c.collective.sizes_mb = {1};
  CHECK(collective_host_bytes(c, 2, &op, &i) == mib + mib / 2);
  CHECK(op == "reduce_scatter");
  CHECK(i == 0);
  // The check counts the pool: a rising sweep that fits by its largest point alone does not fit.
  c.collective.ops = {"all_reduce"};
  c.collective.sizes_mb = {512, 1024};
  CHECK_NOTHROW(check_collective_host_memory(c, 2, 2, 3072 * mib));  // (512 + 1024) MiB x 2 ranks: exactly fits
  CHECK_THROWS_WITH(check_collective_host_memory(c, 2, 2, 3072 * mib - 1),
                    Contains("collective.sizes_mb[1] = 1024: collective_bench needs at least 3.00 GiB of host memory "
                             "(host staging of 1.50 GiB a rank, the blocks parallel.comm mpi keeps from every point up "
                             "to all_reduce of this size, x 2 rank(s) on this host)") &&
                        Contains("use smaller or fewer sizes"));
  c.parallel.comm = "nccl";  // no host staging
  CHECK(collective_host_bytes(c, 2) == 0);
}
