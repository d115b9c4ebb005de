// bf16 <-> fp32 on the host: bf16 is the top half of an IEEE-754 binary32.
#pragma once
#include <cstdint>
#include <cstring>

namespace trainer {

/// The fp32 value of a bf16 bit pattern (exact).
inline float bf16_to_float(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// fp32 -> bf16 rounded to nearest, ties to even (NaN stays a quiet NaN), as CUDA's __float2bfloat16_rn.
inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace trainer
