// bf16 storage on the host and the device: round-to-nearest-even and stochastic rounding of fp32 to bf16 bits, and
// the counter-based hash that drives stochastic rounding. One definition for the CPU backend and kernels/ (the
// functions are __host__ __device__ under nvcc), so both backends round the same element the same way.
//
// bf16 is the upper half of an IEEE fp32 (1 sign, 8 exponent, 7 mantissa bits); its bits are a uint16_t here.
//   round to nearest even:  b = (u + 0x7fff + ((u >> 16) & 1)) >> 16 of the fp32 bits u (NaN -> quiet NaN, sign kept)
//   stochastic rounding:    b = (u + r) >> 16 with r uniform in [0, 2^16): the magnitude rounds up with probability
//     (u & 0xffff) / 2^16, which is the fraction of the bf16 step that x lies above the truncated value (fp32 values
//     are evenly spaced inside one bf16 step, also across a power of two), so E[round(x)] = x exactly for finite x
//     (Gupta et al. 2015, "Deep Learning with Limited Numerical Precision", arXiv:1502.02551, eq. 5). Inf and NaN
//     round to nearest even. A finite x within one bf16 step of the largest bf16 may round to Inf.
//   hash (SplitMix64's finaliser, Steele et al. 2014, as in java.util.SplittableRandom):
//     mix(z):  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;  z ^ (z >> 31)
//     key   = mix(seed + (t + 1) * 0x9e3779b97f4a7c15)                  one per AdamW step (seed, t)
//     r(i)  = mix(key + (i + 1) * 0x9e3779b97f4a7c15) >> 48             the 16 random bits of element index i
//   (all arithmetic mod 2^64): r depends on (seed, t, i) only, not on how a range is split or launched.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TRAINER_HD __host__ __device__ __forceinline__
#else
#define TRAINER_HD inline
#endif

namespace trainer::bf16_bits {

TRAINER_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

TRAINER_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

/// The fp32 value of bf16 bits b (exact).
TRAINER_HD float to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

/// fp32 -> bf16 bits, round to nearest even (what __float2bfloat16 does); NaN -> a quiet NaN of the same sign.
TRAINER_HD uint16_t from_f32(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// fp32 -> bf16 bits, rounded stochastically with the random bits r (only the low 16 are used; see the file
/// comment): unbiased for finite f. Inf and NaN round to nearest even.
TRAINER_HD uint16_t from_f32_stochastic(float f, uint32_t r) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return from_f32(f);
  return uint16_t((u + (r & 0xffffu)) >> 16);
}

/// SplitMix64's output function (see the file comment).
TRAINER_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

/// The per-step key of stochastic rounding: mix(seed + (t + 1) * golden).
TRAINER_HD uint64_t rounding_key(uint64_t seed, int64_t t) { return mix64(seed + (uint64_t(t) + 1u) * kGolden); }

/// The 16 random bits of element index i under `key`: mix(key + (i + 1) * golden) >> 48.
TRAINER_HD uint32_t rounding_bits(uint64_t key, int64_t i) {
  return uint32_t(mix64(key + (uint64_t(i) + 1u) * kGolden) >> 48);
}

}  // namespace trainer::bf16_bits

#undef TRAINER_HD
