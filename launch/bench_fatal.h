// trainer::fatal (core/errors.h) for the ctypes check-and-benchmark libraries (launch/flash_bench,
// launch/dw_adamw_bench): src/core/errors.cpp needs MPI, they do not. Include in exactly one translation unit of a
// library, after common.cuh.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>

namespace trainer {
/// Prints the library error and aborts (the Python caller sees the process end).
[[noreturn]] void fatal(const char* lib, const char* stmt, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "fatal: %s error in %s at %s:%d: %s\n", lib, stmt, file, line, msg.c_str());
  std::abort();
}
}  // namespace trainer
