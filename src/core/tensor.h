// Tensor: a non-owning view (pointer, dtype, shape, device) over contiguous row-major memory, and Buffer, the owning
// allocation made through a Backend and tagged with a memory Category.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/errors.h"

namespace trainer {

enum class DType : uint8_t { f32, bf16, f64, i32 };
enum class Device : uint8_t { cpu, cuda };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
  }
  return 0;
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
  }
  return "?";
}

/// Contiguous row-major view, up to 4 dims. Does not own memory.
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  std::array<int64_t, 4> shape{1, 1, 1, 1};

  Tensor() = default;
  Tensor(void* d, DType t, Device dev, std::initializer_list<int64_t> s) : data(d), dtype(t), device(dev) {
    TRAINER_CHECK(s.size() <= 4, "Tensor: at most 4 dims");
    for (int64_t v : s) shape[ndim++] = v;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  int64_t size(int i) const { return shape[i < 0 ? ndim + i : i]; }
  /// Rows x cols of the view seen as a matrix (all leading dims folded into rows).
  int64_t rows() const { return ndim == 0 ? 1 : numel() / shape[ndim - 1]; }
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  /// A view of `n` elements starting at element `offset`, reshaped to `s`.
  Tensor slice(int64_t offset, std::initializer_list<int64_t> s) const {
    Tensor t(static_cast<char*>(data) + offset * int64_t(dtype_size(dtype)), dtype, device, s);
    return t;
  }
  Tensor reshape(std::initializer_list<int64_t> s) const {
    Tensor t(data, dtype, device, s);
    TRAINER_CHECK(t.numel() == numel(), "Tensor::reshape: {} elements into {}", numel(), t.numel());
    return t;
  }
  std::string shape_str() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  }
};

}  // namespace trainer
