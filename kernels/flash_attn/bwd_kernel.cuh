// FlashAttention-2 backward on the tensor cores (mma.sync, fp32 accumulation): bf16 inputs (m16n8k16), or fp32
// inputs as 3xTF32 (m16n8k8; one kernel for both through the fragment layer of mma.cuh).
// Dao 2023, arXiv:2307.08691, Algorithm 2 and section 3.2; the partitioning follows flash-attention's
// `flash_bwd_kernel.h` (a CTA owns a K/V tile and loops over query tiles; dQ through fp32 atomics).
//
//   preprocess (passes.cu):  D = rowsum(dO ∘ O) per query row (fp32), dQacc = 0
//   dK/dV pass (one CTA per key tile of kBN keys, each warp kNT x 16 keys; loop over query tiles of kBM rows):
//     Sᵀ = K Qᵀ,  Pᵀ = exp2(Sᵀ·scale·log2e − L·log2e) (0 where masked),  dPᵀ = V dOᵀ,  dSᵀ = Pᵀ ∘ (dPᵀ − D),
//     dV += Pᵀ dO,  dK += dSᵀ Q,  and (atomic mode) dQacc += dS K through dS staged in shared memory;
//     finally dK ·= scale.
//   dQ pass (deterministic mode; one CTA per query tile, each warp 16 rows; loop over key tiles):
//     S = Q Kᵀ,  P = exp2(...),  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ += dS K;  dQ ·= scale.
//   convert (atomic mode): dQ = scale · dQacc, into the dQ view in its dtype (and dK, dV when split, below).
//   split queries (few key tiles: short sequences, few heads): a key tile's query loop is cut into chunks of
//     dkdv_chunk tiles, one CTA each (key tiles x chunks CTAs per head); each adds its partial dK·scale and dV into fp32
//     accumulators (atomics) and a convert pass writes dK, dV (FlashAttention-2's sequence-parallel split, applied
//     to the query loop of the dK/dV pass, the way flash-decoding splits the key loop of the forward).
// Rows past the end: K, V, Q, dO tiles are zero-filled; L of a missing query is +inf so its P is 0.
#pragma once
#include "flash_attn/mma.cuh"
#include "flash_attn/params.h"

namespace trainer::flash {

constexpr float kLog2e = 1.4426950408889634f;

/// Eight consecutive elements of a row as floats: one 16-byte load (bf16) or two (f32); p 16-byte aligned.
template <class T>
__device__ __forceinline__ void load8(const T* p, float (&f)[8]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 v = __bfloat1622float2(h[k]);
      f[2 * k] = v.x, f[2 * k + 1] = v.y;
    }
  }
}

/// Eight floats into base[off .. off + 7] (f32, or bf16 rounded to nearest): vec: 16-byte stores (the address
/// 16-byte aligned), else pairs (8-byte / 4-byte aligned).
__device__ __forceinline__ void store8(void* base, int64_t off, bool f32, const float (&v)[8], bool vec) {
  if (!vec) {
#pragma unroll
    for (int k = 0; k < 4; ++k) store_pair(base, off + 2 * k, f32, v[2 * k], v[2 * k + 1]);
  } else if (f32) {
    float4* d = reinterpret_cast<float4*>(static_cast<float*>(base) + off);
    d[0] = make_float4(v[0], v[1], v[2], v[3]);
    d[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint4 u;
    u.x = pack_bf16(v[0], v[1]), u.y = pack_bf16(v[2], v[3]), u.z = pack_bf16(v[4], v[5]), u.w = pack_bf16(v[6], v[7]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(base) + off) = u;
  }
}

/// The atomic mode's last pass, one thread per eight consecutive elements of [B, H, T, d] (d % 8 == 0): dQ = scale
/// · dq_accum (read through dq_swizzle when p.dq_accum_swizzled) into the dq view and, when the dK/dV pass was split
/// (with_dkv), dK, dV = dkv_accum [2][B, H, T, d] (already scaled) into theirs; vec: 16-byte stores (the views'
/// rows 16-byte aligned), else pairs. TO: the gradients' dtype (f32 or bf16). Index arithmetic in 32 bits where the
/// problem fits (64-bit divisions per element pair made the previous version integer-bound: 20 us for xl's 31 MB).
template <class TO, class Index>
__device__ __forceinline__ void bwd_convert_8(const FlashBwdParams& p, bool with_dkv, bool vec, Index e, Index n) {
  const Index d = Index(p.d_head), T = Index(p.seq_len), H = Index(p.num_heads);
  const Index bht = e / d, c = e - bht * d, tt = bht % T, bh = bht / T, h = bh % H, b = bh / H;
  const int64_t off = int64_t(b) * p.dqkv_batch_stride + int64_t(tt) * p.dqkv_row_stride +
                      int64_t(h) * p.dqkv_head_stride + int64_t(c);
  constexpr bool f32 = std::is_same_v<TO, float>;
  const float* src = p.dq_accum + int64_t(bht) * d;
  const int c0 = p.dq_accum_swizzled ? dq_swizzle(int(tt), int(c), int(d)) : int(c);
  const int c1 = p.dq_accum_swizzled ? dq_swizzle(int(tt), int(c) + 4, int(d)) : int(c) + 4;
  const float4 lo = *reinterpret_cast<const float4*>(src + c0), hi = *reinterpret_cast<const float4*>(src + c1);
  const float sc = p.softmax_scale;
  const float q[8] = {lo.x * sc, lo.y * sc, lo.z * sc, lo.w * sc, hi.x * sc, hi.y * sc, hi.z * sc, hi.w * sc};
  store8(p.dq, off, f32, q, vec);
  if (with_dkv) {
    float k[8], v[8];
    load8(p.dkv_accum + int64_t(e), k);
    load8(p.dkv_accum + int64_t(n) + int64_t(e), v);
    store8(p.dk, off, f32, k, vec);
    store8(p.dv, off, f32, v, vec);
  }
}
template <class TO>
__global__ void __launch_bounds__(256) flash_bwd_convert_kernel(const FlashBwdParams p, bool with_dkv, bool vec) {
  const int64_t n = int64_t(p.batch) * p.num_heads * p.seq_len * p.d_head;
  const int64_t e = 8 * (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (e >= n) return;
  if (n <= int64_t(INT32_MAX)) bwd_convert_8<TO, uint32_t>(p, with_dkv, vec, uint32_t(e), uint32_t(n));
  else bwd_convert_8<TO, int64_t>(p, with_dkv, vec, e, n);
}

/// Elt: the element type of q, k, v, dO (bf16, or float for the 3xTF32 fp32 kernels; mma.cuh).
template <int kD_, int kBN_, int kBM_, bool kAtomicDQ_, int kMinBlocks_ = 1, int kNT_ = 1, class Elt_ = __nv_bfloat16>
struct BwdTraits {
  using Elt = Elt_;
  using Reg = FragReg<Elt>;
  static constexpr int kD = kD_, kBN = kBN_, kBM = kBM_;  // keys per CTA, queries per iteration
  static constexpr int kMinBlocks = kMinBlocks_;           // __launch_bounds__ CTAs per SM
  static constexpr bool kAtomicDQ = kAtomicDQ_;
  static constexpr int kNT = kNT_;  // m16 key tiles per warp: each Q / dO fragment read serves kNT key tiles
  static constexpr int kWarps = kBN / (16 * kNT), kThreads = kWarps * 32;
  static constexpr int kStride = kD + 8, kSStride = kBM + 8;  // padded rows (elements) of K/V/Q/dO and of dS
  static constexpr int kMT = kBM / 16;                          // m16 tiles of the dQ product
  static constexpr int kWarpsPerMT = kWarps / kMT;
  static constexpr int kNG = kD / 16;                           // n16 groups of the dQ product
  static constexpr int kNGPerWarp = (kNG + kWarpsPerMT - 1) / kWarpsPerMT;
  static constexpr int kSmemBytes = (2 * kBN + 4 * kBM) * kStride * int(sizeof(Elt)) + 4 * kBM * 4 +
                                    (kAtomicDQ ? kBN * kSStride * int(sizeof(Elt)) : 0);
  static_assert(kD % 16 == 0 && kBN % (16 * kNT) == 0 && kBM % 16 == 0, "tiles are multiples of 16");
  static_assert(!kAtomicDQ || (kWarps % kMT == 0 && kWarps >= kMT), "dQ partition: warps a multiple of m16 tiles");
};

/// kSplit: the split-queries build (key tiles x chunks of p.dkdv_chunk query tiles per head); without it the
/// split code compiles away.
template <class Tr, bool kCausal, bool kSplit = false>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) flash_bwd_dkdv_kernel(const FlashBwdParams p) {
  using E = typename Tr::Elt;
  using Reg = typename Tr::Reg;
  constexpr int kD = Tr::kD, kBN = Tr::kBN, kBM = Tr::kBM, kStride = Tr::kStride, kThreads = Tr::kThreads;
  constexpr int kSStride = Tr::kSStride, kNT = Tr::kNT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* sK = reinterpret_cast<E*>(smem_raw);  // [kBN][kStride]
  E* sV = sK + kBN * kStride;              // [kBN][kStride]
  E* sQ = sV + kBN * kStride;              // [2][kBM][kStride]
  E* sdO = sQ + 2 * kBM * kStride;         // [2][kBM][kStride]
  float* sL = reinterpret_cast<float*>(sdO + 2 * kBM * kStride);  // [2][kBM] L·log2e (+inf past the end)
  float* sDs = sL + 2 * kBM;                                       // [2][kBM] D
  E* sdS = reinterpret_cast<E*>(sDs + 2 * kBM);                    // [kBN][kSStride] dSᵀ (atomic mode)

  const int T = p.seq_len;
  const TileCoord c = tile_coord(p);  // c.tiles: key tiles x query chunks
  if (c.b >= p.batch) return;         // past the last (b, h) pair (the last group of tile_grid)
  const int splits = kSplit ? c.tiles / ((T + kBN - 1) / kBN) : 1;  // query chunks per key tile
  const int n_block = c.tile / splits;  // key tile; tile 0 (the most query tiles when causal) first
  const int split = c.tile % splits;
  const int h = c.h, b = c.b;
  const int n0 = n_block * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t ld = p.qkv_row_stride, ldo = p.o_row_stride;
  const int64_t off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const int64_t ooff = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  const E* gq = static_cast<const E*>(p.q) + off;
  const E* gk = static_cast<const E*>(p.k) + off;
  const E* gv = static_cast<const E*>(p.v) + off;
  const E* gdo = static_cast<const E*>(p.dout) + ooff;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  const float* gL = p.lse + bh * T;
  const float* gD = p.dsum + bh * T;

  int m_begin = kCausal ? n0 / kBM : 0, m_end = (T + kBM - 1) / kBM;
  if (splits > 1) {  // this CTA's chunk of the query loop; a chunk past the end has nothing to do
    m_begin += split * p.dkdv_chunk;
    if (m_begin >= m_end) return;
    m_end = min(m_end, m_begin + p.dkdv_chunk);
  }

  auto load_q_tile = [&](int m, int buf) {
    load_tile_async<kBM, kD, kThreads>(sQ + buf * kBM * kStride, gq, ld, m * kBM, T, tid);
    load_tile_async<kBM, kD, kThreads>(sdO + buf * kBM * kStride, gdo, ldo, m * kBM, T, tid);
    for (int i = tid; i < kBM; i += kThreads) {
      const int row = m * kBM + i;
      sL[buf * kBM + i] = row < T ? gL[row] * kLog2e : INFINITY;
      sDs[buf * kBM + i] = row < T ? gD[row] : 0.f;
    }
  };
  load_tile_async<kBN, kD, kThreads>(sK, gk, ld, n0, T, tid);
  load_tile_async<kBN, kD, kThreads>(sV, gv, ld, n0, T, tid);
  load_q_tile(m_begin, 0);
  cp_async_commit();

  float dk[kNT][kD / 8][4], dv[kNT][kD / 8][4];
#pragma unroll
  for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[ni][j][e] = dv[ni][j][e] = 0.f;
  const float sl2 = p.softmax_scale * kLog2e;
  // Warp key tile ni covers keys (warp * kNT + ni) * 16 .. +15 of the CTA's; this thread's are g and g + 8 of it.
  auto tile_key = [&](int ni) { return (warp * kNT + ni) * 16; };

  for (int m = m_begin; m < m_end; ++m) {
    const int buf = (m - m_begin) & 1;
    if (m + 1 < m_end) load_q_tile(m + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const E* sQb = sQ + buf * kBM * kStride;
    const E* sdOb = sdO + buf * kBM * kStride;
    const float* sLb = sL + buf * kBM;
    const float* sDb = sDs + buf * kBM;

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: [kNT x 16 keys of this warp] x [kBM queries].
    float s[kNT][kBM / 8][4], dp[kNT][kBM / 8][4];
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[ni][j][e] = dp[ni][j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      Reg ak[kNT][4], av[kNT][4];
#pragma unroll
      for (int ni = 0; ni < kNT; ++ni) {
        load_a<kStride>(ak[ni], sK, tile_key(ni), kk * 16, lane);
        load_a<kStride>(av[ni], sV, tile_key(ni), kk * 16, lane);
      }
#pragma unroll
      for (int nn = 0; nn < kBM / 16; ++nn) {
        Reg bq[4], bo[4];
        load_b_nk<kStride>(bq, sQb, nn * 16, kk * 16, lane);
        load_b_nk<kStride>(bo, sdOb, nn * 16, kk * 16, lane);
#pragma unroll
        for (int ni = 0; ni < kNT; ++ni) {
          mma(s[ni][2 * nn], ak[ni], bq[0], bq[1]);
          mma(s[ni][2 * nn + 1], ak[ni], bq[2], bq[3]);
          mma(dp[ni][2 * nn], av[ni], bo[0], bo[1]);
          mma(dp[ni][2 * nn + 1], av[ni], bo[2], bo[3]);
        }
      }
    }

    // Pᵀ = exp2(Sᵀ sl2 - L) (0 where masked), dSᵀ = Pᵀ ∘ (dPᵀ - D).
    const int m0 = m * kBM;
    const bool need_mask = n0 + kBN > T || (kCausal && n0 + kBN - 1 > m0);
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
      const int ql = j * 8 + 2 * t;
      const float2 L2 = *reinterpret_cast<const float2*>(sLb + ql);
      const float2 Dq = *reinterpret_cast<const float2*>(sDb + ql);
#pragma unroll
      for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float Le = (e & 1) ? L2.y : L2.x, De = (e & 1) ? Dq.y : Dq.x;
          float pv = exp2_fast(fmaf(s[ni][j][e], sl2, -Le));
          if (need_mask) {
            const int key = n0 + tile_key(ni) + g + (e >> 1) * 8, query = m0 + ql + (e & 1);
            if (key >= T || (kCausal && key > query)) pv = 0.f;
          }
          s[ni][j][e] = pv;
          dp[ni][j][e] = pv * (dp[ni][j][e] - De);
        }
    }

    // dV += Pᵀ dO, dK += dSᵀ Q: A from registers, B = dO / Q [queries][d] read transposed.
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
      Reg ap[kNT][4], ads[kNT][4];
#pragma unroll
      for (int ni = 0; ni < kNT; ++ni) {
        c_to_a(ap[ni], s[ni][2 * kk], s[ni][2 * kk + 1]);
        c_to_a(ads[ni], dp[ni][2 * kk], dp[ni][2 * kk + 1]);
      }
#pragma unroll
      for (int dd = 0; dd < kD / 16; ++dd) {
        Reg bo[4], bq[4];
        load_b_kn<kStride>(bo, sdOb, kk * 16, dd * 16, lane);
        load_b_kn<kStride>(bq, sQb, kk * 16, dd * 16, lane);
#pragma unroll
        for (int ni = 0; ni < kNT; ++ni) {
          mma(dv[ni][2 * dd], ap[ni], bo[0], bo[1]);
          mma(dv[ni][2 * dd + 1], ap[ni], bo[2], bo[3]);
          mma(dk[ni][2 * dd], ads[ni], bq[0], bq[1]);
          mma(dk[ni][2 * dd + 1], ads[ni], bq[2], bq[3]);
        }
      }
    }

    if constexpr (Tr::kAtomicDQ) {
      // dSᵀ (as Elt) to shared [key][query], then dQacc[m tile] += dS K, partitioned over the warps by output tile.
#pragma unroll
      for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
        for (int j = 0; j < kBM / 8; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            sts_pair<kSStride>(sdS, tile_key(ni) + g + r * 8, j * 8 + 2 * t, dp[ni][j][2 * r], dp[ni][j][2 * r + 1]);
      __syncthreads();
      const int mt = warp % Tr::kMT, ng0 = warp / Tr::kMT;
      float acc[Tr::kNGPerWarp][2][4];
#pragma unroll
      for (int i = 0; i < Tr::kNGPerWarp; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][0][e] = acc[i][1][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) {
        Reg a[4];
        load_a_t<kSStride>(a, sdS, mt * 16, kk * 16, lane);
#pragma unroll
        for (int i = 0; i < Tr::kNGPerWarp; ++i) {
          const int ng = ng0 + i * Tr::kWarpsPerMT;
          if (ng < Tr::kNG) {
            Reg bk[4];
            load_b_kn<kStride>(bk, sK, kk * 16, ng * 16, lane);
            mma(acc[i][0], a, bk[0], bk[1]);
            mma(acc[i][1], a, bk[2], bk[3]);
          }
        }
      }
      float* gdq = p.dq_accum + bh * T * kD;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = m0 + mt * 16 + g + r * 8;
        if (row < T) {
#pragma unroll
          for (int i = 0; i < Tr::kNGPerWarp; ++i) {
            const int ng = ng0 + i * Tr::kWarpsPerMT;
            if (ng < Tr::kNG) {
#pragma unroll
              for (int hh = 0; hh < 2; ++hh) {
                float* dst = gdq + int64_t(row) * kD + ng * 16 + hh * 8 + 2 * t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                atomicAdd(reinterpret_cast<float2*>(dst), make_float2(acc[i][hh][2 * r], acc[i][hh][2 * r + 1]));
#else
                atomicAdd(dst, acc[i][hh][2 * r]);
                atomicAdd(dst + 1, acc[i][hh][2 * r + 1]);
#endif
              }
            }
          }
        }
      }
    }
    __syncthreads();  // the other buffers (and dS) are rewritten by the next iteration
  }
  cp_async_wait<0>();

  // Epilogue: dK ·= scale; rows past the end are not written. Split: add into the fp32 accumulators instead.
  if (splits > 1) {
    float* gdk = p.dkv_accum + bh * T * kD;
    float* gdv = gdk + int64_t(p.batch) * p.num_heads * T * kD;
#pragma unroll
    for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = n0 + tile_key(ni) + g + r * 8;
        if (key >= T) continue;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          const int64_t e = int64_t(key) * kD + j * 8 + 2 * t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(gdk + e),
                    make_float2(dk[ni][j][2 * r] * p.softmax_scale, dk[ni][j][2 * r + 1] * p.softmax_scale));
          atomicAdd(reinterpret_cast<float2*>(gdv + e), make_float2(dv[ni][j][2 * r], dv[ni][j][2 * r + 1]));
#else
          atomicAdd(gdk + e, dk[ni][j][2 * r] * p.softmax_scale);
          atomicAdd(gdk + e + 1, dk[ni][j][2 * r + 1] * p.softmax_scale);
          atomicAdd(gdv + e, dv[ni][j][2 * r]);
          atomicAdd(gdv + e + 1, dv[ni][j][2 * r + 1]);
#endif
        }
      }
    return;
  }
  const int64_t goff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int ni = 0; ni < kNT; ++ni)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = n0 + tile_key(ni) + g + r * 8;
      if (key >= T) continue;
      const int64_t ro = goff + int64_t(key) * p.dqkv_row_stride;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        store_pair(p.dv, ro + j * 8 + 2 * t, p.dqkv_f32, dv[ni][j][2 * r], dv[ni][j][2 * r + 1]);
        store_pair(p.dk, ro + j * 8 + 2 * t, p.dqkv_f32, dk[ni][j][2 * r] * p.softmax_scale,
                   dk[ni][j][2 * r + 1] * p.softmax_scale);
      }
    }
}

template <int kD_, int kBM_, int kBN_, int kMinBlocks_ = 1, class Elt_ = __nv_bfloat16>
struct BwdDqTraits {
  using Elt = Elt_;
  using Reg = FragReg<Elt>;
  static constexpr int kD = kD_, kBM = kBM_, kBN = kBN_;  // queries per CTA, keys per iteration
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kWarps = kBM / 16, kThreads = kWarps * 32;
  static constexpr int kStride = kD + 8;
  static constexpr int kSmemBytes = (2 * kBM + 4 * kBN) * kStride * int(sizeof(Elt));
  static_assert(kD % 16 == 0 && kBM % 16 == 0 && kBN % 16 == 0, "tiles are multiples of 16");
};

/// Deterministic dQ pass: one CTA per query tile, the K/V tiles streamed as in the forward.
template <class Tr, bool kCausal>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) flash_bwd_dq_kernel(const FlashBwdParams p) {
  using E = typename Tr::Elt;
  using Reg = typename Tr::Reg;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStride = Tr::kStride, kThreads = Tr::kThreads;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* sQ = reinterpret_cast<E*>(smem_raw);
  E* sdO = sQ + kBM * kStride;
  E* sK = sdO + kBM * kStride;     // [2][kBN][kStride]
  E* sV = sK + 2 * kBN * kStride;  // [2][kBN][kStride]

  const TileCoord c = tile_coord(p);
  if (c.b >= p.batch) return;  // past the last (b, h) pair (the last group of tile_grid)
  const int m_block = c.tiles - 1 - c.tile;  // the longest (causal) rows first
  const int h = c.h, b = c.b;
  const int T = p.seq_len, m0 = m_block * kBM;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t ld = p.qkv_row_stride;
  const int64_t off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const int64_t ooff = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  const E* gq = static_cast<const E*>(p.q) + off;
  const E* gk = static_cast<const E*>(p.k) + off;
  const E* gv = static_cast<const E*>(p.v) + off;
  const E* gdo = static_cast<const E*>(p.dout) + ooff;
  const int64_t bh = int64_t(b) * p.num_heads + h;

  int n_blocks = (T + kBN - 1) / kBN;
  if (kCausal) n_blocks = min(n_blocks, (m0 + kBM + kBN - 1) / kBN);
  load_tile_async<kBM, kD, kThreads>(sQ, gq, ld, m0, T, tid);
  load_tile_async<kBM, kD, kThreads>(sdO, gdo, p.o_row_stride, m0, T, tid);
  load_tile_async<kBN, kD, kThreads>(sK, gk, ld, (n_blocks - 1) * kBN, T, tid);
  load_tile_async<kBN, kD, kThreads>(sV, gv, ld, (n_blocks - 1) * kBN, T, tid);
  cp_async_commit();

  const int row0 = m0 + warp * 16 + g;
  float L2[2], Dr[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    L2[r] = row < T ? p.lse[bh * T + row] * kLog2e : INFINITY;
    Dr[r] = row < T ? p.dsum[bh * T + row] : 0.f;
  }
  float dq[kD / 8][4];
#pragma unroll
  for (int j = 0; j < kD / 8; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.f;
  const float sl2 = p.softmax_scale * kLog2e;

  for (int it = 0; it < n_blocks; ++it) {
    const int nb = n_blocks - 1 - it, buf = it & 1;
    if (it + 1 < n_blocks) {
      load_tile_async<kBN, kD, kThreads>(sK + (buf ^ 1) * kBN * kStride, gk, ld, (nb - 1) * kBN, T, tid);
      load_tile_async<kBN, kD, kThreads>(sV + (buf ^ 1) * kBN * kStride, gv, ld, (nb - 1) * kBN, T, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const E* sKb = sK + buf * kBN * kStride;
    const E* sVb = sV + buf * kBN * kStride;

    float s[kBN / 8][4], dp[kBN / 8][4];
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      Reg aq[4], ao[4];
      load_a<kStride>(aq, sQ, warp * 16, kk * 16, lane);
      load_a<kStride>(ao, sdO, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < kBN / 16; ++nn) {
        Reg bk[4], bv[4];
        load_b_nk<kStride>(bk, sKb, nn * 16, kk * 16, lane);
        load_b_nk<kStride>(bv, sVb, nn * 16, kk * 16, lane);
        mma(s[2 * nn], aq, bk[0], bk[1]);
        mma(s[2 * nn + 1], aq, bk[2], bk[3]);
        mma(dp[2 * nn], ao, bv[0], bv[1]);
        mma(dp[2 * nn + 1], ao, bv[2], bv[3]);
      }
    }
    const int n0 = nb * kBN;
    const bool need_mask = n0 + kBN > T || (kCausal && n0 + kBN - 1 > m0);
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pv = exp2_fast(fmaf(s[j][e], sl2, -L2[r]));
        if (need_mask) {
          const int key = n0 + j * 8 + 2 * t + (e & 1), row = row0 + r * 8;
          if (key >= T || (kCausal && key > row)) pv = 0.f;
        }
        dp[j][e] = pv * (dp[j][e] - Dr[r]);
      }
    // dQ += dS K: dS from registers, K [keys][d] read transposed.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      Reg a[4];
      c_to_a(a, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < kD / 16; ++dd) {
        Reg bk[4];
        load_b_kn<kStride>(bk, sKb, kk * 16, dd * 16, lane);
        mma(dq[2 * dd], a, bk[0], bk[1]);
        mma(dq[2 * dd + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }
  cp_async_wait<0>();

  const int64_t goff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + r * 8;
    if (row >= T) continue;
    const int64_t ro = goff + int64_t(row) * p.dqkv_row_stride;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
      store_pair(p.dq, ro + j * 8 + 2 * t, p.dqkv_f32, dq[j][2 * r] * p.softmax_scale,
                 dq[j][2 * r + 1] * p.softmax_scale);
  }
}

}  // namespace trainer::flash
