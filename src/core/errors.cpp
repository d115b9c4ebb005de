#include "core/errors.h"

#include <mpi.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace trainer {

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(buf, len);
}

namespace {
std::atomic<void (*)(const std::string&)> g_fatal_hook{nullptr};
std::atomic<int> g_fatal_state{0};  // 0 no fatal() yet, 1 the first one is running the hook, 2 it is done
}  // namespace

void set_fatal_hook(void (*hook)(const std::string& msg)) { g_fatal_hook.store(hook); }

void fatal(const char* lib, const char* stmt, const char* file, int line, const std::string& msg) {
  int inited = 0, finalized = 0, rank = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "[%s error] rank %d %s:%d: %s\n    %s\n", lib, rank, file, line, msg.c_str(), stmt);
  std::fflush(stderr);
  int expected = 0;
  if (g_fatal_state.compare_exchange_strong(expected, 1)) {  // the first fatal() runs the hook
    if (auto* hook = g_fatal_hook.exchange(nullptr)) {
      try {
        hook(fmt::format("{} error: {}: {}", lib, stmt, msg));
      } catch (...) {  // best effort: the process is aborting
      }
    }
    g_fatal_state.store(2);
  } else {  // another thread's fatal() (e.g. the main thread's next call after a watchdog's abort): let its hook finish
    for (int i = 0; i < 500 && g_fatal_state.load() != 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  spdlog::shutdown();
  if (inited && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

}  // namespace trainer
