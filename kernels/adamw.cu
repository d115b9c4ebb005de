// AdamW, the course's variant (Loshchilov & Hutter 2019, arXiv:1711.05101, Alg. 2; CS336 assignment 1 and
// DESIGN.md), one fused pass over flat arrays. For each element, in this order:
//   g  = grad_scale * g
//   p  = p - decay * p,  decay = lr * weight_decay        (decoupled weight decay, with the old p)
//   m  = beta1 m + (1 - beta1) g                          (1 - beta: fp64, then rounded; AdamWStep)
//   v  = beta2 v + (1 - beta2) g^2
//   p  = p - step_size * m / (sqrt(v) + eps),             step_size = lr sqrt(1 - beta2^t) / (1 - beta1^t)
//   p_work = T(p)                                         (optional bf16/f32 working copy, round to nearest even)
// p, g, m, v f32 [n]; p_work [n] or null. Reads 16 bytes and writes 12 (+2 or 4) per element: memory bound.
// Pattern: llm.c `llmc/adamw.cuh` (adamw_kernel3 updates the master weights and writes the low-precision copy).
// 16-byte vector loads when every pointer allows it (the common case: whole allocations); otherwise scalar.
// Optionally the same pass sums g^2 for the gradient norm (no separate read of the gradients).
// bf16 storage (adamw_bf16): p, g, m, v bf16; the same per-element fp32 update (adamw_one), then p, m, v rounded to
// bf16 once each (p optionally stochastically, backend/bf16.h). Reads 8 bytes and writes 6 per element. Each thread
// takes chunks of 8 elements: the first chunk is the head up to p's 16-byte boundary (when g, m, v share p's
// misalignment; else every chunk is loaded element by element), the rest are 16-byte vectors with a ragged tail.
#include "adamw.cuh"
#include "common.cuh"
#include "align.h"
#include "reductions.cuh"

#include "backend/bf16.h"

#include <algorithm>
#include <tuple>

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

// kSumsq: each block also sums g^2 (g as given) in fp64 and writes it to partials[blockIdx.x] (fixed-shape tree).
template <class TW, bool kSumsq>
__global__ __launch_bounds__(kThreads) void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                                                         float* __restrict__ m, float* __restrict__ v,
                                                         TW* __restrict__ p_work, int64_t n, AdamWStep a,
                                                         double* __restrict__ partials) {
  load_per_step(a);
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    const float gi = g[i];
    if (kSumsq) acc += double(gi) * double(gi);
    const float r = adamw_one(pi, gi, mi, vi, a);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p_work) p_work[i] = from_f32<TW>(r);
  }
  if (kSumsq) {
    __shared__ double shared[32];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
  }
}

// Four elements per thread and iteration through float4; n4 = n / 4 vectors (the tail is done by adamw_kernel).
template <class TW, bool kSumsq>
__global__ __launch_bounds__(kThreads) void adamw_vec4_kernel(float4* __restrict__ p, const float4* __restrict__ g,
                                                              float4* __restrict__ m, float4* __restrict__ v,
                                                              TW* __restrict__ p_work, int64_t n4, AdamWStep a,
                                                              double* __restrict__ partials) {
  load_per_step(a);
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    float4 pi = p[i], mi = m[i], vi = v[i];
    const float4 gi = g[i];
    if (kSumsq)
      acc += double(gi.x) * double(gi.x) + double(gi.y) * double(gi.y) + double(gi.z) * double(gi.z) +
             double(gi.w) * double(gi.w);
    const float r0 = adamw_one(pi.x, gi.x, mi.x, vi.x, a);
    const float r1 = adamw_one(pi.y, gi.y, mi.y, vi.y, a);
    const float r2 = adamw_one(pi.z, gi.z, mi.z, vi.z, a);
    const float r3 = adamw_one(pi.w, gi.w, mi.w, vi.w, a);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (p_work) {
      TW* w = p_work + 4 * i;
      w[0] = from_f32<TW>(r0);
      w[1] = from_f32<TW>(r1);
      w[2] = from_f32<TW>(r2);
      w[3] = from_f32<TW>(r3);
    }
  }
  if (kSumsq) {
    __shared__ double shared[32];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
  }
}

// ---- bf16 storage ----
constexpr int kChunk = 8;  // bf16 elements per 16-byte vector
struct alignas(16) Bf16x8 {
  bf16 v[kChunk];
};

/// Chunk c of [0, n): with head > 0 chunk 0 is [0, head), then chunks of 8 (the last may be short).
struct Chunks {
  int64_t n, head;
  bool vec;  // chunks after the head may use 16-byte accesses (when whole)
  __device__ __forceinline__ void range(int64_t c, int64_t& b, int64_t& e) const {
    if (head > 0 && c == 0) {
      b = 0;
      e = head;
      return;
    }
    b = head + (c - (head > 0)) * kChunk;
    e = b + kChunk < n ? b + kChunk : n;
  }
};

__device__ __forceinline__ bf16 bits_bf16(uint16_t u) { return __ushort_as_bfloat16(u); }

template <bool kSumsq, bool kStochastic>
__global__ __launch_bounds__(kThreads) void adamw_bf16_kernel(bf16* __restrict__ p, const bf16* __restrict__ g,
                                                              bf16* __restrict__ m, bf16* __restrict__ v, Chunks ch,
                                                              int64_t n_chunks, AdamWStep a, StochasticRounding sr,
                                                              double* __restrict__ partials) {
  load_per_step(a);
  if (kStochastic && a.per_step) sr.key = a.per_step->rounding_key;
  double acc = 0.0;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < n_chunks;
       c += int64_t(gridDim.x) * blockDim.x) {
    int64_t b, e;
    ch.range(c, b, e);
    const int cnt = int(e - b);
    const bool vec = ch.vec && cnt == kChunk && !(ch.head > 0 && c == 0);
    Bf16x8 pv, gv, mv, vv;
    if (vec) {
      pv = *reinterpret_cast<const Bf16x8*>(p + b);
      gv = *reinterpret_cast<const Bf16x8*>(g + b);
      mv = *reinterpret_cast<const Bf16x8*>(m + b);
      vv = *reinterpret_cast<const Bf16x8*>(v + b);
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < cnt) {
          pv.v[k] = p[b + k];
          gv.v[k] = g[b + k];
          mv.v[k] = m[b + k];
          vv.v[k] = v[b + k];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      if (k >= cnt) break;
      float pi = to_f32(pv.v[k]), mi = to_f32(mv.v[k]), vi = to_f32(vv.v[k]);
      const float gi = to_f32(gv.v[k]);
      if (kSumsq) acc += double(gi) * double(gi);
      adamw_one(pi, gi, mi, vi, a);
      if (kStochastic)
        pv.v[k] = bits_bf16(bf16_bits::from_f32_stochastic(pi, bf16_bits::rounding_bits(sr.key, sr.index_offset + b + k)));
      else
        pv.v[k] = __float2bfloat16(pi);
      mv.v[k] = __float2bfloat16(mi);
      vv.v[k] = __float2bfloat16(vi);
    }
    if (vec) {
      *reinterpret_cast<Bf16x8*>(p + b) = pv;
      *reinterpret_cast<Bf16x8*>(m + b) = mv;
      *reinterpret_cast<Bf16x8*>(v + b) = vv;
    } else {
#pragma unroll
      for (int k = 0; k < kChunk; ++k) {
        if (k < cnt) {
          p[b + k] = pv.v[k];
          m[b + k] = mv.v[k];
          v[b + k] = vv.v[k];
        }
      }
    }
  }
  if (kSumsq) {
    __shared__ double shared[32];
    acc = block_sum(acc, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void adamw(float* p, const float* g, float* m, float* v, void* p_work, DType t_work, int64_t n, const AdamWStep& a,
           double* partials, double* sumsq_out, cudaStream_t s) {
  const bool sumsq = sumsq_out != nullptr;
  if (n <= 0) {
    if (sumsq) reduce_partials(sumsq_out, partials, 0, s);
    return;
  }
  // With a sum of squares the grids depend on n only and use at most kReduceMaxBlocks partials together.
  auto grid = [&](int64_t items, int cap) {
    const unsigned gsz = elementwise_grid(items, kThreads);
    return sumsq ? std::min<unsigned>(gsz, unsigned(cap)) : gsz;
  };
  dispatch_float(p_work ? t_work : DType::f32, "adamw p_work", [&](auto aw) {
    using TW = typename decltype(aw)::type;
    TW* w = static_cast<TW*>(p_work);
    int64_t done = 0;
    unsigned used = 0;  // partials written so far
    if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
      const int64_t n4 = n / 4;
      if (n4 > 0) {
        const unsigned G = grid(n4, kReduceMaxBlocks - 1);
        auto args = std::make_tuple(reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g),
                                    reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), w, n4, a, partials);
        if (sumsq)
          std::apply([&](auto... x) { adamw_vec4_kernel<TW, true><<<G, kThreads, 0, s>>>(x...); }, args);
        else
          std::apply([&](auto... x) { adamw_vec4_kernel<TW, false><<<G, kThreads, 0, s>>>(x...); }, args);
        used = G;
      }
      done = 4 * n4;
    }
    if (done < n) {
      const unsigned G = grid(n - done, kReduceMaxBlocks - int(used));
      auto args = std::make_tuple(p + done, g + done, m + done, v + done, w ? w + done : nullptr, n - done, a,
                                  sumsq ? partials + used : nullptr);
      if (sumsq)
        std::apply([&](auto... x) { adamw_kernel<TW, true><<<G, kThreads, 0, s>>>(x...); }, args);
      else
        std::apply([&](auto... x) { adamw_kernel<TW, false><<<G, kThreads, 0, s>>>(x...); }, args);
      used += G;
    }
    CUDA_CHECK(cudaGetLastError());
    if (sumsq) reduce_partials(sumsq_out, partials, int(used), s);
  });
}

void adamw_bf16(bf16* p, const bf16* g, bf16* m, bf16* v, int64_t n, const AdamWStep& a, const StochasticRounding* sr,
                double* partials, double* sumsq_out, cudaStream_t s) {
  const bool sumsq = sumsq_out != nullptr;
  if (n <= 0) {
    if (sumsq) reduce_partials(sumsq_out, partials, 0, s);
    return;
  }
  // Vector accesses when g, m and v are as misaligned as p (then one head of up to 7 elements aligns all four).
  const uintptr_t mis = reinterpret_cast<uintptr_t>(p) & 15u;
  const bool same = (reinterpret_cast<uintptr_t>(g) & 15u) == mis && (reinterpret_cast<uintptr_t>(m) & 15u) == mis &&
                    (reinterpret_cast<uintptr_t>(v) & 15u) == mis;
  Chunks ch{n, 0, same};
  if (same && mis) ch.head = std::min<int64_t>(n, int64_t((16u - mis) / sizeof(bf16)));
  const int64_t n_chunks = (ch.head > 0) + ceil_div<int64_t>(n - ch.head, kChunk);
  unsigned G = elementwise_grid(n_chunks, kThreads);
  if (sumsq) G = std::min<unsigned>(G, unsigned(kReduceMaxBlocks));
  const StochasticRounding r = sr ? *sr : StochasticRounding{0, 0};
  auto launch = [&](auto kernel) { kernel<<<G, kThreads, 0, s>>>(p, g, m, v, ch, n_chunks, a, r, partials); };
  if (sumsq)
    sr ? launch(adamw_bf16_kernel<true, true>) : launch(adamw_bf16_kernel<true, false>);
  else
    sr ? launch(adamw_bf16_kernel<false, true>) : launch(adamw_bf16_kernel<false, false>);
  CUDA_CHECK(cudaGetLastError());
  if (sumsq) reduce_partials(sumsq_out, partials, int(G), s);
}

}  // namespace trainer::kernels
