// Errors: one fatal path for library failures, typed exceptions for what a run can report.
//
//  - ConfigError: bad user input (config, CLI, data files). main() prints one line "trainer: error: ..." on stderr and
//    exits with code 2 before any output exists.
//  - OutOfMemory: an allocation failed; the job turns it into a result record with status "oom".
//  - RuntimeError: anything else a job can report in its record (status "error").
//  - fatal(): a broken library call (CUDA, cuBLAS, NCCL, MPI). Logs file:line, rank and the library's text, then
//    aborts the whole MPI job (a dead rank would leave its peers blocked in a collective).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace trainer {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A library error the program cannot continue from (a CUDA / NCCL / MPI failure, a collective past
/// parallel.comm_timeout_s): prints "[lib error] rank r file:line: msg" and the statement, calls the fatal hook, then
/// MPI_Abort (exit 1). Any thread.
[[noreturn]] void fatal(const char* lib, const char* stmt, const char* file, int line, const std::string& msg);
/// What fatal() runs before it aborts, with its message (at most once, from the first fatal() of the process; a
/// fatal() on another thread meanwhile waits up to 5 s for it):
/// main() sets it on rank 0 to replace the "running" result record by one with status "error", and on a rank > 0 of
/// several to send the message to rank 0 (MpiSession::notify_failure), which writes that record, and wait a moment
/// for rank 0 to abort the job. Set before the threads that may fail start; nullptr: none.
void set_fatal_hook(void (*hook)(const std::string& msg));

/// Throws ConfigError(fmt::format(...)) when cond is false. For validating user input.
#define CONFIG_CHECK(cond, ...)                                          \
  do {                                                                   \
    if (!(cond)) throw ::trainer::ConfigError(fmt::format(__VA_ARGS__)); \
  } while (0)

/// Throws RuntimeError naming file:line when an internal invariant is broken.
#define TRAINER_CHECK(cond, ...)                                                                              \
  do {                                                                                                        \
    if (!(cond))                                                                                              \
      throw ::trainer::RuntimeError(fmt::format("{} ({}:{}: {})", fmt::format(__VA_ARGS__), __FILE__, __LINE__, \
                                                #cond));                                                      \
  } while (0)

#define TRAINER_CHECK_LIB(expr, ok, to_str, lib)                                        \
  do {                                                                                  \
    auto st_ = (expr);                                                                  \
    if (st_ != (ok)) ::trainer::fatal(lib, #expr, __FILE__, __LINE__, to_str(st_));     \
  } while (0)

std::string mpi_error_string(int code);
#define MPI_CHECK(e) TRAINER_CHECK_LIB(e, MPI_SUCCESS, ::trainer::mpi_error_string, "MPI")

}  // namespace trainer
