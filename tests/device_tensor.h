// Tensors on a backend for the CUDA tests: the GPU and CPU backends, bf16 rounding on the host, and upload/download
// of host float vectors into f32/bf16/i32 device tensors. Shared by test_cuda_ops.cpp, test_flash_cuda.cpp.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace trainer::testing {

// ---- backends and tensors -------------------------------------------------------------------------------------------

inline Backend& gpu() {
  static std::unique_ptr<Backend> b = make_backend(Device::cuda, 0);
  return *b;
}
inline Backend& cpu() {
  static std::unique_ptr<Backend> b = make_backend(Device::cpu, 0);
  return *b;
}

#define REQUIRE_GPU()                                \
  do {                                               \
    if (!cuda_available()) {                         \
      WARN("no CUDA device visible: skipped");       \
      return;                                        \
    }                                                \
  } while (0)

using Vec = std::vector<float>;

inline uint16_t f32_to_bf16_bits(float f) {  // round to nearest even, as __float2bfloat16
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float round_bf16(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }
inline Vec round_bf16(Vec v) {
  for (auto& x : v) x = round_bf16(x);
  return v;
}
/// The values a tensor of dtype t would hold: rounded to bf16 for bf16, unchanged for f32.
inline Vec as_dtype(const Vec& v, DType t) { return t == DType::bf16 ? round_bf16(v) : v; }

/// A tensor with its storage on one backend.
struct Dev {
  Buffer buf;
  Tensor t;
};

inline Dev make(Backend& be, DType dt, std::initializer_list<int64_t> shape) {
  Dev d;
  Tensor probe(nullptr, dt, be.device(), shape);
  d.buf = be.alloc(std::max<size_t>(probe.bytes(), 16), Category::activations);
  d.t = Tensor(d.buf.data(), dt, be.device(), shape);
  return d;
}

inline void upload(Backend& be, const Tensor& t, const Vec& v) {
  REQUIRE(size_t(t.numel()) == v.size());
  if (t.dtype == DType::f32) {
    be.copy_from_host(t.data, v.data(), v.size() * 4);
  } else if (t.dtype == DType::bf16) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16_bits(v[i]);
    be.copy_from_host(t.data, h.data(), h.size() * 2);
  } else {
    FAIL("upload: dtype " << dtype_name(t.dtype));
  }
}

inline Dev make_from(Backend& be, DType dt, std::initializer_list<int64_t> shape, const Vec& v) {
  Dev d = make(be, dt, shape);
  upload(be, d.t, v);
  return d;
}

inline Dev make_i32(Backend& be, const std::vector<int32_t>& v) {
  Dev d = make(be, DType::i32, {int64_t(v.size())});
  be.copy_from_host(d.t.data, v.data(), v.size() * 4);
  return d;
}

inline Vec download(Backend& be, const Tensor& t) {
  Vec out(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    be.copy_to_host(out.data(), t.data, out.size() * 4);
  } else if (t.dtype == DType::bf16) {
    std::vector<uint16_t> h(out.size());
    be.copy_to_host(h.data(), t.data, h.size() * 2);
    for (size_t i = 0; i < h.size(); ++i) out[i] = bf16_bits_to_f32(h[i]);
  } else {
    FAIL("download: dtype " << dtype_name(t.dtype));
  }
  return out;
}

}  // namespace trainer::testing
