// Test hooks: environment variables (TRAINER_TEST_*) that tests set to make a slow path happen on demand. Unset in a
// real run, where each costs one getenv.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace trainer {

/// When the environment variable `var` is set: logs a warning naming it and `where`, then sleeps that many seconds.
/// Returns whether it paused. (tests/cli/test_resume.py, tests/mpi/test_mpi_resume.py: a checkpoint's write or a
/// resume's read held up, as slow storage would.)
/// early: before the log exists (main's start-up), the line goes to stderr as it is.
inline bool test_pause(const char* var, const char* where, bool early = false) {
  const char* s = std::getenv(var);
  if (!s) return false;
  if (early)
    std::fprintf(stderr, "test hook %s: pausing %s s %s\n", var, s, where);
  else
    spdlog::warn("test hook {}: pausing {} s {}", var, s, where);
  std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(s)));
  return true;
}

/// When the environment variable `var` equals `what`: throws std::runtime_error naming both, as a failure there
/// would (tests/mpi/test_mpi_resume.py: rank 0 failing to hold a weight in the middle of a checkpoint's gathers).
inline void test_fail(const char* var, const std::string& what) {
  const char* s = std::getenv(var);
  if (s && what == s) throw std::runtime_error(std::string("test hook ") + var + ": failing at " + what);
}

/// When the environment variable `var` equals `rank`: throws std::bad_alloc, as a host allocation that failed there
/// would (tests/mpi/test_mpi_trainer.py: one rank out of host memory while it reads init.weights).
inline void test_bad_alloc(const char* var, int rank) {
  const char* s = std::getenv(var);
  if (s && std::to_string(rank) == s) throw std::bad_alloc();
}

}  // namespace trainer
