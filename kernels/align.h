// 16-byte alignment tests for the kernels' vector paths (host code, before a launch): a pointer, and strides whose
// rows all start 16-byte aligned.
#pragma once
#include <cstdint>

namespace trainer {

/// True when ptr is 16-byte aligned (a uint4 / float4 load or store from it is legal).
inline bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

/// True when strides a, b, c (in elements of `bytes` bytes) keep every row start 16-byte aligned.
inline bool strides16(int64_t a, int64_t b, int64_t c, int bytes) {
  const int64_t e = 16 / bytes;
  return a % e == 0 && b % e == 0 && c % e == 0;
}

}  // namespace trainer
