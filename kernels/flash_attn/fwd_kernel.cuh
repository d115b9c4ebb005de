// FlashAttention-2 forward on the tensor cores (mma.sync, fp32 accumulation): bf16 inputs (m16n8k16), or fp32 inputs
// as 3xTF32 (m16n8k8; the fragment layer of mma.cuh gives both the same fragments, so this one kernel serves both).
// Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", arXiv:2307.08691,
// Algorithm 1, with the warp partitioning of section 3.3 (each warp owns kMT x 16 query rows and sees the whole K/V
// tile, so no shared-memory exchange is needed between warps; each K/V fragment read from shared memory serves the
// warp's kMT row tiles) and the layout tricks of flash-attention's
// `flash_fwd_kernel.h` (P kept in registers as the A operand of P V; softmax in the exp2 domain).
//
// One CTA per (query tile of kBM rows, head, batch). K/V tiles of kBN keys stream through two shared-memory buffers
// (cp.async: the next tile loads while this one is used). Per tile: S = Q Kᵀ; for each row the running max m and
// sum l are updated online (m in log2 units of the scaled scores); O is rescaled by 2^(m_old - m_new) and
// O += P V. At the end O /= l and L = (m + log2 l) ln 2, the natural-log logsumexp of scale·S.
// Causal: key tiles wholly above the diagonal are never visited (the loop ends at the diagonal); the index
// comparison runs only on tiles that cross it (and on the ragged last key tile).
// Split keys (problems whose query tiles give fewer than two CTAs per SM, with >= 8 key tiles): the key tiles are
// cut into fwd_chunk-tile chunks, one CTA per (query tile, chunk); each writes its normalised partial O and
// logsumexp, and the combine kernel merges them: L = log sum_s exp(L_s), O = sum_s exp(L_s - L) O_s
// (flash-decoding, Dao et al. 2023).
#pragma once
#include "flash_attn/mma.cuh"
#include "flash_attn/params.h"

namespace trainer::flash {

constexpr int kMaxFwdSplits = 16;

/// Split keys: merges the S = p.fwd_splits partial results into out and lse; one warp per (b, h, t) row.
/// L = m + log sum_s exp(L_s - m) with m = max_s L_s; O = sum_s exp(L_s - L) O_s (chunks with L_s = -inf weigh 0 and
/// their O_s is not read). TO: out's dtype (f32 or bf16).
template <class TO>
__global__ void flash_fwd_combine_kernel(const FlashParams p) {
  const int64_t rows = int64_t(p.batch) * p.num_heads * p.seq_len;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together (blockDim is a multiple of 32)
  const int S = p.fwd_splits, d = p.d_head;
  const float ls = lane < S ? p.lse_accum[int64_t(lane) * rows + row] : -INFINITY;
  float mx = ls;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float w = ls == -INFINITY ? 0.f : __expf(ls - mx);
  float sum = w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  float wts[kMaxFwdSplits];
#pragma unroll
  for (int s = 0; s < kMaxFwdSplits; ++s) wts[s] = __shfl_sync(0xffffffffu, w, s) / sum;
  const int tt = int(row % p.seq_len);
  const int64_t bh = row / p.seq_len;
  const int h = int(bh % p.num_heads), b = int(bh / p.num_heads);
  const int64_t ro = int64_t(b) * p.o_batch_stride + int64_t(tt) * p.o_row_stride + int64_t(h) * p.o_head_stride;
  for (int c = 2 * lane; c < d; c += 64) {
    float x = 0.f, y = 0.f;
#pragma unroll
    for (int s = 0; s < kMaxFwdSplits; ++s)
      if (s < S && wts[s] > 0.f) {
        const float2 v = *reinterpret_cast<const float2*>(p.o_accum + (int64_t(s) * rows + row) * d + c);
        x = fmaf(wts[s], v.x, x);
        y = fmaf(wts[s], v.y, y);
      }
    if constexpr (std::is_same_v<TO, float>)
      *reinterpret_cast<float2*>(static_cast<float*>(p.o) + ro + c) = make_float2(x, y);
    else
      *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.o) + ro + c) = __floats2bfloat162_rn(x, y);
  }
  if (lane == 0) p.lse[row] = mx + logf(sum);
}

/// Elt: the element type of q, k, v (bf16, or float for the 3xTF32 fp32 kernels; mma.cuh).
template <int kD_, int kBM_, int kBN_, bool kQRegs_, int kMinBlocks_ = 1, int kMT_ = 1, class Elt_ = __nv_bfloat16>
struct FwdTraits {
  using Elt = Elt_;
  using Reg = FragReg<Elt>;
  static constexpr int kD = kD_, kBM = kBM_, kBN = kBN_;
  static constexpr int kMinBlocks = kMinBlocks_;  // __launch_bounds__ CTAs per SM (caps the registers)
  static constexpr bool kQRegs = kQRegs_;         // keep Q's A fragments in registers across the K/V loop
  static constexpr int kMT = kMT_;                // m16 row tiles per warp: K/V fragments are reused kMT times
  static constexpr int kWarps = kBM / (16 * kMT), kThreads = kWarps * 32;
  static constexpr int kStride = kD + 8;  // padded shared row, elements
  static constexpr int kSmemBytes = (kBM + 4 * kBN) * kStride * int(sizeof(Elt));
  static_assert(kD % 16 == 0 && kBM % (16 * kMT) == 0 && kBN % 16 == 0, "tiles are multiples of 16");
};

/// kSplit: the split-keys build (p.fwd_splits chunks); without it the split code compiles away (no registers spent
/// on it in the main configurations).
template <class Tr, bool kCausal, bool kSplit = false>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) flash_fwd_kernel(const FlashParams p) {
  using E = typename Tr::Elt;
  using Reg = typename Tr::Reg;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kStride = Tr::kStride, kThreads = Tr::kThreads;
  constexpr int kMT = Tr::kMT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* sQ = reinterpret_cast<E*>(smem_raw);
  E* sK = sQ + kBM * kStride;      // [2][kBN][kStride]
  E* sV = sK + 2 * kBN * kStride;  // [2][kBN][kStride]

  const int splits = kSplit ? p.fwd_splits : 1;
  const TileCoord c = tile_coord(p);  // c.tiles: query tiles x splits
  if (c.b >= p.batch) return;         // past the last (b, h) pair (the last group of tile_grid)
  const int m_block = c.tiles / splits - 1 - c.tile / splits;  // the longest (causal) rows first
  const int split = c.tile % splits;
  const int h = c.h, b = c.b;
  const int T = p.seq_len, m0 = m_block * kBM;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t ld = p.qkv_row_stride;
  const int64_t off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const E* gq = static_cast<const E*>(p.q) + off;
  const E* gk = static_cast<const E*>(p.k) + off;
  const E* gv = static_cast<const E*>(p.v) + off;

  int n_blocks = (T + kBN - 1) / kBN;  // key tiles [n_lo, n_blocks) are this CTA's
  if (kCausal) n_blocks = min(n_blocks, (m0 + kBM + kBN - 1) / kBN);
  int n_lo = 0;
  const int64_t part = (int64_t(split) * p.batch * p.num_heads + int64_t(b) * p.num_heads + h) * T;  // split rows
  if (splits > 1) {
    n_lo = split * p.fwd_chunk;
    n_blocks = min(n_blocks, n_lo + p.fwd_chunk);
    if (n_blocks <= n_lo) {  // a chunk wholly above the diagonal: no keys, weight 0 in the combine
      for (int i = tid; i < kBM; i += kThreads)
        if (m0 + i < T) p.lse_accum[part + m0 + i] = -INFINITY;
      return;
    }
  }
  const int n_cnt = n_blocks - n_lo;

  load_tile_async<kBM, kD, kThreads>(sQ, gq, ld, m0, T, tid);
  load_tile_async<kBN, kD, kThreads>(sK, gk, ld, (n_blocks - 1) * kBN, T, tid);
  load_tile_async<kBN, kD, kThreads>(sV, gv, ld, (n_blocks - 1) * kBN, T, tid);
  cp_async_commit();

  float o[kMT][kD / 8][4];
  float m_run[kMT][2], l_run[kMT][2];
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi) {
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) o[mi][j][0] = o[mi][j][1] = o[mi][j][2] = o[mi][j][3] = 0.f;
    m_run[mi][0] = m_run[mi][1] = -INFINITY;
    l_run[mi][0] = l_run[mi][1] = 0.f;
  }
  Reg qf[kMT][Tr::kQRegs ? kD / 16 : 1][4];
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scale·log2(e): scores in log2 units
  // Warp tile mi covers rows (warp * kMT + mi) * 16 .. +15 of the query tile; this thread's are g and g + 8 of it.
  auto tile_row = [&](int mi) { return (warp * kMT + mi) * 16; };

  for (int it = 0; it < n_cnt; ++it) {
    const int nb = n_blocks - 1 - it, buf = it & 1;
    if (it + 1 < n_cnt) {  // prefetch the next (lower) key tile into the other buffer
      load_tile_async<kBN, kD, kThreads>(sK + (buf ^ 1) * kBN * kStride, gk, ld, (nb - 1) * kBN, T, tid);
      load_tile_async<kBN, kD, kThreads>(sV + (buf ^ 1) * kBN * kStride, gv, ld, (nb - 1) * kBN, T, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const E* sKb = sK + buf * kBN * kStride;
    const E* sVb = sV + buf * kBN * kStride;
    if constexpr (Tr::kQRegs) {
      if (it == 0) {
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
          for (int kk = 0; kk < kD / 16; ++kk)
            load_a<kStride>(qf[mi][kk], sQ, tile_row(mi), kk * 16, lane);
      }
    }

    // S = Q Kᵀ: [kMT x 16 rows of this warp] x [kBN keys]; each K fragment serves the kMT row tiles.
    float s[kMT][kBN / 8][4];
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      Reg a[kMT][4];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) {
        if constexpr (Tr::kQRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mi][i] = qf[mi][kk][i];
        } else {
          load_a<kStride>(a[mi], sQ, tile_row(mi), kk * 16, lane);
        }
      }
#pragma unroll
      for (int nn = 0; nn < kBN / 16; ++nn) {
        Reg bb[4];
        load_b_nk<kStride>(bb, sKb, nn * 16, kk * 16, lane);
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma(s[mi][2 * nn], a[mi], bb[0], bb[1]);
          mma(s[mi][2 * nn + 1], a[mi], bb[2], bb[3]);
        }
      }
    }

    // Mask: keys past the end, and (causal) keys after the query; only on tiles that need it.
    const int n0 = nb * kBN;
    if (n0 + kBN > T || (kCausal && n0 + kBN - 1 > m0)) {
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + j * 8 + 2 * t + (e & 1), row = m0 + tile_row(mi) + g + (e >> 1) * 8;
            if (key >= T || (kCausal && key > row)) s[mi][j][e] = -INFINITY;
          }
    }

    // Online softmax, two rows per thread and row tile; a row is spread over the 4 threads of a quad.
#pragma unroll
    for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) mx = fmaxf(mx, fmaxf(s[mi][j][2 * r], s[mi][j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mi][r], mx * sl2);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing visible yet stays at 0
        const float alpha = exp2_fast(m_run[mi][r] - m_use);
        m_run[mi][r] = m_new;
        float rs = 0.f;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          s[mi][j][2 * r] = exp2_fast(fmaf(s[mi][j][2 * r], sl2, -m_use));
          s[mi][j][2 * r + 1] = exp2_fast(fmaf(s[mi][j][2 * r + 1], sl2, -m_use));
          rs += s[mi][j][2 * r] + s[mi][j][2 * r + 1];
        }
        l_run[mi][r] = l_run[mi][r] * alpha + rs;  // per-thread partial sum; the quad is summed at the end
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
          o[mi][j][2 * r] *= alpha;
          o[mi][j][2 * r + 1] *= alpha;
        }
      }

    // O += P V: P from registers as the A operand, V [keys][d] read transposed (shared by the tiles).
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      Reg a[kMT][4];
#pragma unroll
      for (int mi = 0; mi < kMT; ++mi) c_to_a(a[mi], s[mi][2 * kk], s[mi][2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < kD / 16; ++dd) {
        Reg bb[4];
        load_b_kn<kStride>(bb, sVb, kk * 16, dd * 16, lane);
#pragma unroll
        for (int mi = 0; mi < kMT; ++mi) {
          mma(o[mi][2 * dd], a[mi], bb[0], bb[1]);
          mma(o[mi][2 * dd + 1], a[mi], bb[2], bb[3]);
        }
      }
    }
    __syncthreads();  // this buffer is refilled by the next iteration's prefetch
  }
  cp_async_wait<0>();

  // Epilogue: O / l and L = m ln2 + ln l.
  const int64_t o_off = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
  for (int mi = 0; mi < kMT; ++mi)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[mi][r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = m0 + tile_row(mi) + g + r * 8;
      if (row >= T) continue;
      if (splits > 1) {  // partial result of this key chunk (a row may see none of its keys: l = 0)
        const float inv = l > 0.f ? 1.f / l : 0.f;
        float* go = p.o_accum + (part + row) * kD;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j)
          *reinterpret_cast<float2*>(go + j * 8 + 2 * t) =
              make_float2(o[mi][j][2 * r] * inv, o[mi][j][2 * r + 1] * inv);
        if (t == 0) p.lse_accum[part + row] = l > 0.f ? m_run[mi][r] * 0.6931471805599453f + logf(l) : -INFINITY;
        continue;
      }
      const float inv = 1.f / l;
      const int64_t ro = o_off + int64_t(row) * p.o_row_stride;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j)
        store_pair(p.o, ro + j * 8 + 2 * t, p.o_f32, o[mi][j][2 * r] * inv, o[mi][j][2 * r + 1] * inv);
      if (t == 0) p.lse[(int64_t(b) * p.num_heads + h) * T + row] = m_run[mi][r] * 0.6931471805599453f + logf(l);
    }
}

}  // namespace trainer::flash
