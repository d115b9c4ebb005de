// FlashAttention-2 in fp32 on the FMA units: the same tiling (Dao 2023, arXiv:2307.08691, Algorithms 1 and 2) with
// 64 x 64 tiles in shared memory and 4 x 4 register tiles per thread; correctness first (fp32 inputs need fp32
// arithmetic to reach 1e-4). 256 threads: tx = tid % 16 takes columns tx + 16 j, ty = tid / 16 takes rows 4 ty + i.
// Rows (the 16 lanes of a half-warp share ty) are reduced with shuffles over those 16 lanes.
// The backward is deterministic: a dK/dV pass over key tiles and a dQ pass over query tiles, both recomputing P.
#pragma once
#include <cuda_runtime.h>

#include "flash_attn/params.h"

namespace trainer::flash {

constexpr int kF32Tile = 64, kF32Threads = 256;

template <int kD>
struct F32Traits {
  static constexpr int kS = kD + 1;  // padded row of a [64][kD] tile (floats): column reads by 16 rows hit 16 banks
  static constexpr int kP = kF32Tile + 1;
  static constexpr int kFwdSmem = (3 * kF32Tile * kS + kF32Tile * kP) * 4;
  static constexpr int kDkdvSmem = (4 * kF32Tile * kS + 2 * kF32Tile * kP + 2 * kF32Tile) * 4;
  static constexpr int kDqSmem = (4 * kF32Tile * kS + kF32Tile * kP) * 4;
  static_assert(kD % 16 == 0, "d_head a multiple of 16");
};

/// Rows row0.. of a [T, kD] f32 view (row stride ld) into a padded [64][kD+1] tile; missing rows are 0.
template <int kD>
__device__ __forceinline__ void f32_load_tile(float* s, const float* g, int64_t ld, int row0, int T, int tid) {
  for (int i = tid; i < kF32Tile * kD; i += kF32Threads) {
    const int r = i / kD, c = i % kD;
    s[r * (kD + 1) + c] = row0 + r < T ? g[int64_t(row0 + r) * ld + c] : 0.f;
  }
}

__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int kD>
__global__ void __launch_bounds__(kF32Threads) flash_fwd_f32_kernel(const FlashParams p) {
  using Tr = F32Traits<kD>;
  constexpr int kS = Tr::kS, kP = Tr::kP, kC = kD / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sK = sQ + kF32Tile * kS;
  float* sV = sK + kF32Tile * kS;
  float* sP = sV + kF32Tile * kS;
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kF32Tile, h = blockIdx.y, b = blockIdx.z, T = p.seq_len;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t ld = p.qkv_row_stride, off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const float* gq = static_cast<const float*>(p.q) + off;
  const float* gk = static_cast<const float*>(p.k) + off;
  const float* gv = static_cast<const float*>(p.v) + off;
  f32_load_tile<kD>(sQ, gq, ld, m0, T, tid);

  float o[4][kC] = {}, m[4], l[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] = -INFINITY;
  const int n_end = p.causal ? min(T, m0 + kF32Tile) : T;
  for (int n0 = 0; n0 < n_end; n0 += kF32Tile) {
    __syncthreads();
    f32_load_tile<kD>(sK, gk, ld, n0, T, tid);
    f32_load_tile<kD>(sV, gv, ld, n0, T, tid);
    __syncthreads();
    float s[4][4] = {};
    for (int k = 0; k < kD; ++k) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = sQ[(ty * 4 + i) * kS + k];
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = sK[(tx + 16 * j) * kS + k];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + ty * 4 + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = n0 + tx + 16 * j;
        s[i][j] = (key < T && !(p.causal && key > row)) ? s[i][j] * p.softmax_scale : -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      mx = half_warp_max(mx);
      const float m_new = fmaxf(m[i], mx), m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = expf(m[i] - m_use);
      m[i] = m_new;
      float rs = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float pv = expf(s[i][j] - m_use);
        rs += pv;
        sP[(ty * 4 + i) * kP + tx + 16 * j] = pv;
      }
      l[i] = l[i] * alpha + rs;
#pragma unroll
      for (int c = 0; c < kC; ++c) o[i][c] *= alpha;
    }
    __syncthreads();
    for (int k = 0; k < kF32Tile; ++k) {
      float vv[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) vv[c] = sV[k * kS + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pv = sP[(ty * 4 + i) * kP + k];
#pragma unroll
        for (int c = 0; c < kC; ++c) o[i][c] = fmaf(pv, vv[c], o[i][c]);
      }
    }
  }
  const int64_t ooff = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float li = half_warp_sum(l[i]);
    const int row = m0 + ty * 4 + i;
    if (row >= T) continue;
    float* go = static_cast<float*>(p.o) + ooff + int64_t(row) * p.o_row_stride;
#pragma unroll
    for (int c = 0; c < kC; ++c) go[tx + 16 * c] = o[i][c] / li;
    if (tx == 0) p.lse[(int64_t(b) * p.num_heads + h) * T + row] = m[i] + logf(li);
  }
}

/// dK, dV of one key tile (rows 4 ty + i are keys, columns tx + 16 j are queries of the current query tile).
template <int kD>
__global__ void __launch_bounds__(kF32Threads) flash_bwd_dkdv_f32_kernel(const FlashBwdParams p) {
  using Tr = F32Traits<kD>;
  constexpr int kS = Tr::kS, kP = Tr::kP, kC = kD / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sK = reinterpret_cast<float*>(smem_raw);
  float* sV = sK + kF32Tile * kS;
  float* sQ = sV + kF32Tile * kS;
  float* sdO = sQ + kF32Tile * kS;
  float* sP = sdO + kF32Tile * kS;  // Pᵀ [key][query]
  float* sdS = sP + kF32Tile * kP;  // dSᵀ [key][query]
  float* sL = sdS + kF32Tile * kP;
  float* sDs = sL + kF32Tile;
  const int n0 = blockIdx.x * kF32Tile, h = blockIdx.y, b = blockIdx.z, T = p.seq_len;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t ld = p.qkv_row_stride, off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const int64_t ooff = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  const float* gq = static_cast<const float*>(p.q) + off;
  const float* gk = static_cast<const float*>(p.k) + off;
  const float* gv = static_cast<const float*>(p.v) + off;
  const float* gdo = static_cast<const float*>(p.dout) + ooff;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  f32_load_tile<kD>(sK, gk, ld, n0, T, tid);
  f32_load_tile<kD>(sV, gv, ld, n0, T, tid);

  float dk[4][kC] = {}, dv[4][kC] = {};
  for (int m0 = p.causal ? n0 : 0; m0 < T; m0 += kF32Tile) {
    __syncthreads();
    f32_load_tile<kD>(sQ, gq, ld, m0, T, tid);
    f32_load_tile<kD>(sdO, gdo, p.o_row_stride, m0, T, tid);
    if (tid < kF32Tile) {
      const int q = m0 + tid;
      sL[tid] = q < T ? p.lse[bh * T + q] : INFINITY;
      sDs[tid] = q < T ? p.dsum[bh * T + q] : 0.f;
    }
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    for (int k = 0; k < kD; ++k) {
      float kv[4], vv[4], qv[4], ov[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) kv[i] = sK[(ty * 4 + i) * kS + k], vv[i] = sV[(ty * 4 + i) * kS + k];
#pragma unroll
      for (int j = 0; j < 4; ++j) qv[j] = sQ[(tx + 16 * j) * kS + k], ov[j] = sdO[(tx + 16 * j) * kS + k];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[i][j] = fmaf(kv[i], qv[j], s[i][j]);
          dp[i][j] = fmaf(vv[i], ov[j], dp[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int key = n0 + ty * 4 + i, ql = tx + 16 * j, q = m0 + ql;
        const bool vis = key < T && q < T && !(p.causal && key > q);
        const float pv = vis ? expf(s[i][j] * p.softmax_scale - sL[ql]) : 0.f;
        sP[(ty * 4 + i) * kP + ql] = pv;
        sdS[(ty * 4 + i) * kP + ql] = pv * (dp[i][j] - sDs[ql]);
      }
    __syncthreads();
    for (int q = 0; q < kF32Tile; ++q) {
      float ov[kC], qv[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) ov[c] = sdO[q * kS + tx + 16 * c], qv[c] = sQ[q * kS + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float pv = sP[(ty * 4 + i) * kP + q], dsv = sdS[(ty * 4 + i) * kP + q];
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          dv[i][c] = fmaf(pv, ov[c], dv[i][c]);
          dk[i][c] = fmaf(dsv, qv[c], dk[i][c]);
        }
      }
    }
  }
  const int64_t goff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = n0 + ty * 4 + i;
    if (key >= T) continue;
    float* gdk = static_cast<float*>(p.dk) + goff + int64_t(key) * p.dqkv_row_stride;
    float* gdv = static_cast<float*>(p.dv) + goff + int64_t(key) * p.dqkv_row_stride;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      gdk[tx + 16 * c] = dk[i][c] * p.softmax_scale;
      gdv[tx + 16 * c] = dv[i][c];
    }
  }
}

/// dQ of one query tile (rows 4 ty + i are queries, columns tx + 16 j keys of the current key tile).
template <int kD>
__global__ void __launch_bounds__(kF32Threads) flash_bwd_dq_f32_kernel(const FlashBwdParams p) {
  using Tr = F32Traits<kD>;
  constexpr int kS = Tr::kS, kP = Tr::kP, kC = kD / 16;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);
  float* sdO = sQ + kF32Tile * kS;
  float* sK = sdO + kF32Tile * kS;
  float* sV = sK + kF32Tile * kS;
  float* sdS = sV + kF32Tile * kS;  // dS [query][key]
  const int m0 = (gridDim.x - 1 - blockIdx.x) * kF32Tile, h = blockIdx.y, b = blockIdx.z, T = p.seq_len;
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t ld = p.qkv_row_stride, off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const int64_t ooff = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  const float* gq = static_cast<const float*>(p.q) + off;
  const float* gk = static_cast<const float*>(p.k) + off;
  const float* gv = static_cast<const float*>(p.v) + off;
  const float* gdo = static_cast<const float*>(p.dout) + ooff;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  f32_load_tile<kD>(sQ, gq, ld, m0, T, tid);
  f32_load_tile<kD>(sdO, gdo, p.o_row_stride, m0, T, tid);
  float Lr[4], Dr[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = m0 + ty * 4 + i;
    Lr[i] = q < T ? p.lse[bh * T + q] : INFINITY;
    Dr[i] = q < T ? p.dsum[bh * T + q] : 0.f;
  }
  float dq[4][kC] = {};
  const int n_end = p.causal ? min(T, m0 + kF32Tile) : T;
  for (int n0 = 0; n0 < n_end; n0 += kF32Tile) {
    __syncthreads();
    f32_load_tile<kD>(sK, gk, ld, n0, T, tid);
    f32_load_tile<kD>(sV, gv, ld, n0, T, tid);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    for (int k = 0; k < kD; ++k) {
      float qv[4], ov[4], kv[4], vv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) qv[i] = sQ[(ty * 4 + i) * kS + k], ov[i] = sdO[(ty * 4 + i) * kS + k];
#pragma unroll
      for (int j = 0; j < 4; ++j) kv[j] = sK[(tx + 16 * j) * kS + k], vv[j] = sV[(tx + 16 * j) * kS + k];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
          dp[i][j] = fmaf(ov[i], vv[j], dp[i][j]);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int q = m0 + ty * 4 + i, key = n0 + tx + 16 * j;
        const bool vis = key < T && q < T && !(p.causal && key > q);
        const float pv = vis ? expf(s[i][j] * p.softmax_scale - Lr[i]) : 0.f;
        sdS[(ty * 4 + i) * kP + tx + 16 * j] = pv * (dp[i][j] - Dr[i]);
      }
    __syncthreads();
    for (int k = 0; k < kF32Tile; ++k) {
      float kv[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) kv[c] = sK[k * kS + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float dsv = sdS[(ty * 4 + i) * kP + k];
#pragma unroll
        for (int c = 0; c < kC; ++c) dq[i][c] = fmaf(dsv, kv[c], dq[i][c]);
      }
    }
  }
  const int64_t goff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = m0 + ty * 4 + i;
    if (q >= T) continue;
    float* gdq = static_cast<float*>(p.dq) + goff + int64_t(q) * p.dqkv_row_stride;
#pragma unroll
    for (int c = 0; c < kC; ++c) gdq[tx + 16 * c] = dq[i][c] * p.softmax_scale;
  }
}

}  // namespace trainer::flash
