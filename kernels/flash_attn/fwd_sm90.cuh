// FlashAttention forward for Hopper (sm_90a): warpgroup MMAs (wgmma) from 128B-swizzled shared memory.
// Algorithm: FlashAttention-2 (Dao 2023, arXiv:2307.08691, Algorithm 1; online softmax in the exp2 domain, as
// fwd_kernel.cuh); the tensor-core use follows FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024,
// arXiv:2407.08608, section 3): each warpgroup of 128 threads owns 64 query rows; S = Q Kᵀ is one wgmma chain with
// both operands in shared memory (Q and K K-major); P stays in registers (the S accumulators, packed to bf16, are the
// A operand) and O += P V reads V [keys][d] as an N-major B operand, so no transpose is ever stored.
// Warp specialization as FlashAttention-3 (section 3.1): warpgroup 0 is the producer (setmaxnreg down): one lane
// loads the Q tile and streams the K and V tiles by TMA through Tr::kStages shared stages, K and V each guarded by
// their own mbarriers (full: the transaction bytes; empty: every consumer thread, K once its S product is done, V
// once its O += P V is), so the next K can land while P V still reads V; warpgroups 1 .. kWG are the consumers
// (setmaxnreg up), 64 query rows each, with no CTA barrier between them, so that one's softmax runs under another's
// wgmma. Tr::kOverlap adds FlashAttention-3's intra-warpgroup overlap (Algorithm 2: S_j issued with
// O += P_{j-1} V_{j-1}, the softmax of S_j while the second runs) and Tr::kPingPong its ping-pong (named barriers
// hand the issue of the products from one consumer to the next). An earlier overlap attempt (the design before warp
// specialization) was serialized by ptxas (C7514); this one is not: S is committed before P V and read after
// wait_group 1, P is repacked only after wait_group 0 (NOTES.md, fourteenth session).
// Measured (one H200, 16 heads, T 16384, causal): d 64 with three consumers (192 rows) 1.15 ms, d 128 with two
// 1.91 ms, against 1.40 / 2.71 for the earlier design (all threads loading by cp.async, a CTA barrier per key tile);
// with the overlap (d 128) and overlap + ping-pong (d 64), side by side with the previous production loop (one
// barrier per K / V stage, no overlap): d 128 1.90 -> 1.81 ms (607 TFLOP/s; SDPA 1.85), d 64 1.12 -> 1.10
// (results/h200/2026-12-02/v14/call5).
// d 80 (xl) keeps d 128's shared layout (two 64-column sub-tiles; the TMA zero-fills columns 80..127, which no
// product reads) and runs its products over 80 columns: Q Kᵀ as five k16 steps, O += P V as m64n80 (16 x 80, T 16384,
// causal: 1.31 ms = 525 TFLOP/s, against 2.46 on the mma.sync kernel and SDPA's 1.87; v10 notes). d 96 the same
// way: Q Kᵀ as six k16 steps (four in the first sub-tile, two in the second), O += P V as m64n96.
//
// Query tiles of kBM = 64 kWG rows, longest causal rows first: one CTA each, or (Tr::kPersistent, production since
// v22) one CTA per SM that takes tile after tile from a counter (FlashAttention-3's persistent kernel with its
// dynamic scheduler), the next tile's Q and K / V landing under the last one's P V and O stores. Key tiles of kBN
// keys are visited from the diagonal down; the causal / ragged-edge mask runs only on tiles that need it. Output O
// (bf16 or f32) and the natural-log logsumexp L, as flash_fwd_kernel; problems with few query tiles (split keys) keep
// that kernel (launch.cuh).
#pragma once
#include "flash_attn/mma.cuh"
#include "flash_attn/params.h"
#include "sm90/barriers.cuh"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace trainer::flash::sm90 {

using namespace trainer::sm90;  // the Hopper building blocks (kernels/sm90/)

/// The tensor maps of the attention inputs (q, k, v with the qkv strides; dout with the o strides, backward only): a
/// kernel parameter (__grid_constant__), so that the TMA unit reads them from the parameter space.
struct TmaMaps {
  CUtensorMap q, k, v, dout;
};

/// d (+)= A B for a 64 x N accumulator, both operands from shared memory (N = 16, 24, 32, 40, 48, 64 or 128).
template <int kTA, int kTB, int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t da, uint64_t db, bool acc) {
  if constexpr (kN == 128) wgmma_ss_n128<kTA, kTB>(d, da, db, acc);
  else if constexpr (kN == 64) wgmma_ss_n64<kTA, kTB>(d, da, db, acc);
  else if constexpr (kN == 48) wgmma_ss_n48<kTA, kTB>(d, da, db, acc);
  else if constexpr (kN == 40) wgmma_ss_n40<kTA, kTB>(d, da, db, acc);
  else if constexpr (kN == 32) wgmma_ss_n32<kTA, kTB>(d, da, db, acc);
  else if constexpr (kN == 24) wgmma_ss_n24<kTA, kTB>(d, da, db, acc);
  else {
    static_assert(kN == 16, "generated wgmma_ss widths (gen_wgmma.py)");
    wgmma_ss_n16<kTA, kTB>(d, da, db, acc);
  }
}
/// d (+)= A B for a 64 x N accumulator, A from registers, B from shared memory (N = 64, 80, 96 or 128).
template <int kTB, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t db, bool acc) {
  if constexpr (kN == 128) wgmma_rs_n128<kTB>(d, a, db, acc);
  else if constexpr (kN == 96) wgmma_rs_n96<kTB>(d, a, db, acc);
  else if constexpr (kN == 80) wgmma_rs_n80<kTB>(d, a, db, acc);
  else {
    static_assert(kN == 64, "generated wgmma_rs widths (gen_wgmma.py)");
    wgmma_rs_n64<kTB>(d, a, db, acc);
  }
}

/// Shared sub-tiles (64 columns each) of a head dimension d: d 80 and 96 take two, the second holding columns 64..d-1
/// and the TMA's zero fill (the tensor map's column extent is d), which no product reads.
constexpr int sm90_subtiles(int d) { return (d + 63) / 64; }

/// acc = A Bᵀ over K = kK columns (a multiple of 16), A (64 rows) and B (kN rows) K-major in 128B-swizzled sub-tiles
/// of 64 columns, a_sub / b_sub bytes apart, starting at descriptors a and b: kK / 16 chained k16 steps (step kk of
/// sub-tile sub 32 kk bytes in; d 80: four steps in the first sub-tile, one in the second; d 96: four and two).
template <int kN, int kK>
__device__ __forceinline__ void wgmma_kmajor(float (&acc)[kN / 2], uint64_t a, uint32_t a_sub, uint64_t b,
                                             uint32_t b_sub) {
  static_assert(kK % 16 == 0, "k16 steps");
#pragma unroll
  for (int sub = 0; sub < sm90_subtiles(kK); ++sub)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      if (sub * 4 + kk < kK / 16)
        wgmma_ss<0, 0, kN>(acc, desc_add(a, sub * a_sub + kk * 32), desc_add(b, sub * b_sub + kk * 32), sub + kk > 0);
}

/// Tile configuration: kD: head dim (64, 80, 96 or 128; 80 and 96 are stored as two sub-tiles, sm90_subtiles); kBN: keys per
/// tile (64 or 128); kWG: consumer warpgroups (64 query rows each, kBM = 64 kWG rows per CTA); kStages: K / V stages;
/// kRegsProducer / kRegsConsumer: setmaxnreg budgets (128 threads each; together at most the registers of
/// __launch_bounds__(kThreads, 1)); kOverlap / kPingPong: FlashAttention-3's intra-warpgroup overlap and ping-pong
/// of the consumer loop (flash_fwd_sm90_kernel; the same results, only the schedule differs); kSkipUnitRescale: O's
/// rescale left out where it would multiply by exactly 1 (rescale_o; the same results).
template <int kD_, int kBN_, int kWG_, int kStages_ = 2, int kRegsProducer_ = 24, int kRegsConsumer_ = 160,
          bool kOverlap_ = false, bool kPingPong_ = false, bool kPersistent_ = false, bool kSkipUnitRescale_ = false>
struct FwdTraits {
  static constexpr int kD = kD_, kBN = kBN_, kWG = kWG_, kBM = 64 * kWG_, kThreads = 128 * (kWG_ + 1);
  static constexpr int kStages = kStages_;
  static constexpr bool kOverlap = kOverlap_, kPingPong = kPingPong_;
  // One CTA per SM that runs query tiles in turn, each taking the next from a counter (FwdTileCounter): the next
  // tile's Q and first K / V load while the consumers finish the last P V and store O (FlashAttention-3's
  // persistent kernel and dynamic scheduler).
  static constexpr bool kPersistent = kPersistent_;
  // O's rescale skipped where a warp's rows kept their running max (rescale_o: the same bits, fewer multiplies)
  static constexpr bool kSkipUnitRescale = kSkipUnitRescale_;
  static_assert(!kPingPong || (kOverlap && kWG >= 2), "ping-pong orders the overlapped loops of >= 2 consumers");
  static constexpr int kRegsProducer = kRegsProducer_, kRegsConsumer = kRegsConsumer_;
  static constexpr int kSub = sm90_subtiles(kD);
  static constexpr int kQBytes = kBM * 64 * kSub * 2, kKVBytes = kBN * 64 * kSub * 2;  // (TMA boxes incl. zero fill)
  // Q, stages of K and V, mbarriers (Q full and empty; full and empty per stage, for K and V apart), the next
  // tile's index (kPersistent), alignment
  static constexpr int kSmemBytes = kQBytes + 2 * kStages * kKVBytes + 8 * (2 + 4 * kStages) + 8 + 1024;
  static_assert((kD == 64 || kD == 80 || kD == 96 || kD == 128) && (kBN == 64 || kBN == 128) && kBM <= 256,
                "wgmma tiles, TMA box rows");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
  static constexpr int kRegsLaunch = (65536 / kThreads) & ~7;  // per thread under __launch_bounds__(kThreads, 1)
  static_assert(kRegsProducer <= kRegsLaunch && kRegsConsumer >= kRegsLaunch &&
                    kRegsProducer + kWG * kRegsConsumer <= (kWG + 1) * kRegsLaunch && kRegsProducer % 8 == 0 &&
                    kRegsConsumer % 8 == 0,
                "setmaxnreg: the producer gives registers up, the consumers take at most what it gave");
};

/// Masks one S tile (keys >= T; causal: keys past the row), then FlashAttention-2's online softmax of this thread's
/// two rows (row0, row0 + 8) in the exp2 domain: m_run / l_run (running max in log2 units, running sum) updated, sc
/// (the m64 x kBN accumulators, scores) turned into P = exp2(S sl2 - m), and alpha = exp2(m_old - m_new), the factor
/// O must be rescaled by before P V is added (rescale_o). n0: the tile's first key; row_lo: the warpgroup's first row.
template <int kBN, bool kCausal>
__device__ __forceinline__ void softmax_tile(float (&sc)[kBN / 2], float (&m_run)[2], float (&l_run)[2],
                                             float (&alpha)[2], int n0, int T, int row_lo, int row0, int t,
                                             float sl2) {
  if (n0 + kBN > T || (kCausal && n0 + kBN - 1 > row_lo)) {
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = n0 + j * 8 + 2 * t + (e & 1), row = row0 + (e >> 1) * 8;
        if (key >= T || (kCausal && key > row)) sc[4 * j + e] = -INFINITY;
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * r], sc[4 * j + 2 * r + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run[r], mx * sl2);
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    alpha[r] = exp2_fast(m_run[r] - m_use);
    m_run[r] = m_new;
    float rs = 0.f;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      sc[4 * j + 2 * r] = exp2_fast(fmaf(sc[4 * j + 2 * r], sl2, -m_use));
      sc[4 * j + 2 * r + 1] = exp2_fast(fmaf(sc[4 * j + 2 * r + 1], sl2, -m_use));
      rs += sc[4 * j + 2 * r] + sc[4 * j + 2 * r + 1];
    }
    l_run[r] = l_run[r] * alpha[r] + rs;
  }
}
/// o (m64 x kD accumulators) *= alpha of its row. kSkipUnit: not where every alpha of the warp is exactly 1 (where
/// no row's running max moved, or moved by less than exp2 resolves: o * 1 is o, bit for bit, so the result is the
/// same; FlashAttention-4 skips the rescale below a threshold instead, which changes the numbers). A warp vote, so
/// the lanes of a warp take one path (the warps of a warpgroup may differ; the wgmma after it is the same one).
template <int kD, bool kSkipUnit = false>
__device__ __forceinline__ void rescale_o(float (&o)[kD / 2], const float (&alpha)[2]) {
  if constexpr (kSkipUnit)
    if (__all_sync(0xffffffffu, alpha[0] == 1.f && alpha[1] == 1.f)) return;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      o[4 * j + 2 * r] *= alpha[r];
      o[4 * j + 2 * r + 1] *= alpha[r];
    }
}
/// P (m64 x kBN accumulators) as bf16 A fragments of the kBN / 16 k16 steps of O += P V.
template <int kBN>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[kBN / 16][4], const float (&sc)[kBN / 2]) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    pa[kk][0] = pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

/// Tile L (0 .. tiles x batch x heads - 1) of the tile kernels' CTA order (tile_coord: tile_grid's blockIdx order,
/// x fastest; groups of G = p.tile_group (batch, head) pairs one after the other, inside a group tile t of every
/// pair before tile t + 1 of any), the last group packed to its pairs: the persistent forward's order.
__device__ __forceinline__ TileCoord fwd_tile_at(const FlashParams& p, int L, int tiles) {
  const int pairs = p.batch * p.num_heads, G = min(p.tile_group, pairs);
  const int grp = L / (G * tiles), rem = L - grp * G * tiles, Gg = min(G, pairs - grp * G);
  const int bh = grp * G + rem % Gg;
  return {rem / Gg, tiles, bh / p.num_heads, bh % p.num_heads};
}

/// The persistent forward's tile counters (FlashAttention-3's dynamic scheduler): CTA i of a grid of P runs tile i
/// (fwd_tile_at) first and then tile P + next++ until past the last, so that a CTA that ends its tiles early takes
/// more (static shares let the CTAs drift apart: results/h200/2026-12-03/v21). The CTA that finishes last (done)
/// sets both back to 0 for the next launch: no memset per launch. A launch takes slot launch_count % kFwdSlots
/// (next_fwd_slot, one count over every configuration), so launches in flight on different streams at once use
/// different counters (up to kFwdSlots). The first tile is blockIdx.x, not a claim (no atomic's latency before the
/// first loads, as FlashAttention-3): a CTA that starts late, its SM held by another kernel (NCCL's beside FSDP's
/// forward), still runs one of the first (longest) tiles, a tail of up to one tile that the one-CTA-a-tile grid,
/// which hands out tiles in order as SMs free, would not have.
struct FwdTileCounter {
  unsigned next, done;
};
constexpr int kFwdSlots = 16;
namespace {
__device__ FwdTileCounter g_fwd_tiles[kFwdSlots];  // zero-initialized at module load
}  // namespace

/// O [B, T, H, d] (bf16, or f32 when p.o_f32) and lse [B, H, T] (f32, natural log; rows < T) from bf16 q, k, v
/// views (params.h; rows 16-byte aligned, checked by run_fwd) and their TMA tensor maps `tma` (launch_sm90.cuh),
/// d = Tr::kD, T >= 1. Grid: ceil(T / kBM) x H x B CTAs (tile_grid), or Tr::kPersistent: a 1-D grid of at most
/// that many, whose CTAs take tiles from the counters g_fwd_tiles[slot] (FwdTileCounter; 0 at the launch, left 0);
/// Tr::kThreads threads, Tr::kSmemBytes of dynamic shared memory. sm_90a only.
/// Tr::kOverlap: FlashAttention-3's intra-warpgroup overlap (arXiv:2407.08608, Algorithm 2): S_j = Q K_jᵀ and
/// O += P_{j-1} V_{j-1} are issued together and the softmax of S_j runs while the second product is in flight; the
/// arithmetic (O rescaled by alpha_{j-1} before P_{j-1} V_{j-1} is added) is the same as without it, so is every bit
/// of O and L. Tr::kPingPong (section 3.1): the consumers issue their products in turn (named barrier 1 + wc, 256
/// threads: this warpgroup's sync and the previous one's arrive), so that one's softmax runs under another's wgmma.
template <class Tr, bool kCausal>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    flash_fwd_sm90_kernel(const FlashParams p, const __grid_constant__ TmaMaps tma, int slot) {
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kSub = Tr::kSub, kStages = Tr::kStages, kWG = Tr::kWG;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sQ = align_smem_1024(smem_raw);
  uint8_t* sK = sQ + Tr::kQBytes;            // [stages][kSub][kBN][64]
  uint8_t* sV = sK + kStages * Tr::kKVBytes;  // [stages][kSub][kBN][64]
  uint64_t* q_full = reinterpret_cast<uint64_t*>(sV + kStages * Tr::kKVBytes);
  uint64_t* q_empty = q_full + 1;  // every consumer thread done with Q (after the tile's last S; kPersistent)
  uint64_t* full_k = q_full + 2;   // per stage: K landed (transaction bytes)
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty_k = full_v + kStages;  // per stage: every consumer thread done with K (after S) / V (after P V)
  uint64_t* empty_v = empty_k + kStages;
  int* tile_slot = reinterpret_cast<int*>(empty_v + kStages);  // kPersistent: the next tile (fwd_tile_at), or past

  const int T = p.seq_len, tiles = (T + kBM - 1) / kBM, total = tiles * p.batch * p.num_heads;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  // The tile's first row and key tiles (from the diagonal down); m_block: the longest (causal) rows first.
  auto tile_rows = [&](const TileCoord& c, int& m0, int& n_blocks) {
    m0 = (c.tiles - 1 - c.tile) * kBM;
    n_blocks = (T + kBN - 1) / kBN;
    if (kCausal) n_blocks = min(n_blocks, (m0 + kBM + kBN - 1) / kBN);
  };
  if (tid == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 128 * kWG);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k + s, 1);
      mbar_init(full_v + s, 1);
      mbar_init(empty_k + s, 128 * kWG);
      mbar_init(empty_v + s, 128 * kWG);
    }
    mbar_init_fence();
  }
  __syncthreads();

  // K / V tiles are numbered across this CTA's query tiles (kv0: the count before this tile), which gives each
  // its stage (% kStages) and phase.
  if (wg == 0) {  // ---- producer ----
    setmaxnreg_dec<Tr::kRegsProducer>();
    if (warp == 0 && lane == 0) {
      // kPersistent: tile j's index goes to the consumers through tile_slot, released by q_full's arrive (once they
      // are done with the previous Q: q_empty); an index past the last ends them (an arrive without bytes).
      FwdTileCounter* ctr = g_fwd_tiles + slot;
      int kv0 = 0, L = int(blockIdx.x);
      for (int j = 0;; ++j) {
        TileCoord c;
        if constexpr (!Tr::kPersistent) {
          c = tile_coord(p);
          if (j > 0 || c.b >= p.batch) break;  // one tile; none past the last (b, h) pair (tile_grid's last group)
        } else {
          if (j > 0) mbar_wait(q_empty, uint32_t((j - 1) & 1));
          *tile_slot = L;
          if (L >= total) {
            mbar_arrive(q_full);
            break;
          }
          c = fwd_tile_at(p, L, tiles);
        }
        int m0, n_blocks;
        tile_rows(c, m0, n_blocks);
        mbar_arrive_expect_tx(q_full, uint32_t(Tr::kQBytes));
#pragma unroll
        for (int sub = 0; sub < kSub; ++sub)
          tma_load_4d(sQ + sub * kBM * 128, &tma.q, 64 * sub, m0, c.h, c.b, q_full);
        for (int it = 0; it < n_blocks; ++it) {  // key tiles from the diagonal down
          const int nb = n_blocks - 1 - it, kv = kv0 + it, s = kv % kStages;
          const uint32_t free_parity = ((kv / kStages) & 1) ^ 1;
          mbar_wait(empty_k + s, free_parity);
          mbar_arrive_expect_tx(full_k + s, uint32_t(Tr::kKVBytes));
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub)
            tma_load_4d(sK + s * Tr::kKVBytes + sub * kBN * 128, &tma.k, 64 * sub, nb * kBN, c.h, c.b, full_k + s);
          mbar_wait(empty_v + s, free_parity);
          mbar_arrive_expect_tx(full_v + s, uint32_t(Tr::kKVBytes));
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub)
            tma_load_4d(sV + s * Tr::kKVBytes + sub * kBN * 128, &tma.v, 64 * sub, nb * kBN, c.h, c.b, full_v + s);
        }
        kv0 += n_blocks;
        if constexpr (Tr::kPersistent) L = int(gridDim.x + atomicAdd(&ctr->next, 1u));  // once its loads are issued
      }
      if constexpr (Tr::kPersistent) {
        __threadfence();  // this CTA's last claim before its count in `done`
        if (atomicAdd(&ctr->done, 1u) == gridDim.x - 1) {  // every CTA has made its last claim: reset
          __threadfence();  // (after the others' claims, which their fences ordered before their counts)
          atomicExch(&ctr->next, 0u);
          atomicExch(&ctr->done, 0u);
        }
      }
    }
    return;
  }

  // ---- consumers: warpgroup wc owns rows m0 + 64 wc .. +63 of each tile ----
  setmaxnreg_inc<Tr::kRegsConsumer>();
  const int wc = wg - 1;
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scale·log2(e): scores in log2 units
  const uint64_t q_desc = make_desc(smem_addr(sQ) + uint32_t(64 * wc * 128), 16, 1024);  // K-major A
  const uint64_t k_desc = make_desc(smem_addr(sK), 16, 1024);                            // K-major B (stage 0)
  const uint64_t v_desc = make_desc(smem_addr(sV), kBN * 128, 1024);                     // N-major B (stage 0)
  int kv0 = 0;
  // Tile j (its Q landed: q_full's phase j)
  auto run_tile = [&](const TileCoord& c) {
    const int h = c.h, b = c.b;
    int m0, n_blocks;
    tile_rows(c, m0, n_blocks);
    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f}, alpha[2];
    const int row_lo = m0 + 64 * wc;          // this warpgroup's rows: row_lo .. row_lo + 63
    const int row0 = row_lo + 16 * warp + g;  // this thread's: row0 and row0 + 8
    // S = Q K_itᵀ issued (one commit group), O += P V_it issued (one commit group)
    auto issue_s = [&](float(&sc)[kBN / 2], int it) {
      wgmma_fence();
      wgmma_kmajor<kBN, kD>(sc, q_desc, kBM * 128,
                            desc_add(k_desc, uint32_t(((kv0 + it) % kStages) * Tr::kKVBytes)), kBN * 128);
      wgmma_commit();
    };
    auto issue_pv = [&](const uint32_t(&pa)[kBN / 16][4], int it) {
      const uint32_t stage = uint32_t(((kv0 + it) % kStages) * Tr::kKVBytes);
      fence_regs(o);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk) wgmma_rs<1, kD>(o, pa[kk], desc_add(v_desc, stage + kk * 2048), true);
      wgmma_commit();
    };
    auto stage = [&](int it) { return (kv0 + it) % kStages; };
    auto parity = [&](int it) { return uint32_t(((kv0 + it) / kStages) & 1); };
    // S of key tile `it` is done: its K stage is free, and after the tile's last S so is Q (the next tile's Q may
    // land while P V and the O stores run)
    auto release_k = [&](int it) {
      mbar_arrive(empty_k + stage(it));
      if constexpr (Tr::kPersistent)
        if (it == n_blocks - 1) mbar_arrive(q_empty);
    };
    if constexpr (!Tr::kOverlap) {
      for (int it = 0; it < n_blocks; ++it) {
        mbar_wait(full_k + stage(it), parity(it));
        float sc[kBN / 2];
        issue_s(sc, it);
        wgmma_wait<0>();
        fence_regs(sc);
        release_k(it);
        softmax_tile<kBN, kCausal>(sc, m_run, l_run, alpha, (n_blocks - 1 - it) * kBN, T, row_lo, row0, t, sl2);
        rescale_o<kD, Tr::kSkipUnitRescale>(o, alpha);
        uint32_t pa[kBN / 16][4];
        pack_p<kBN>(pa, sc);
        mbar_wait(full_v + stage(it), parity(it));
        issue_pv(pa, it);
        wgmma_wait<0>();
        fence_regs(o);
        mbar_arrive(empty_v + stage(it));
      }
    } else {
      // Round `it` (0 .. n_blocks - 1) issues S_it and, from round 1, O += P_{it-1} V_{it-1}; the last P V follows.
      // Ping-pong: warpgroup wc waits on barrier 1 + wc before a round's products and then lets the next one go;
      // the last warpgroup starts the first's turn, so it skips its own last arrive (every barrier phase of a tile
      // completes within it).
      auto turn_wait = [&] {
        if constexpr (Tr::kPingPong) named_bar_sync(1 + wc, 256);
      };
      auto turn_pass = [&](int it) {
        if constexpr (Tr::kPingPong)
          if (!(wc == kWG - 1 && it == n_blocks - 1)) named_bar_arrive(1 + (wc + 1) % kWG, 256);
      };
      if constexpr (Tr::kPingPong)
        if (wc == kWG - 1) named_bar_arrive(1, 256);
      uint32_t pa[kBN / 16][4];
      {
        mbar_wait(full_k + stage(0), parity(0));
        float sc[kBN / 2];
        turn_wait();
        issue_s(sc, 0);
        turn_pass(0);
        wgmma_wait<0>();
        fence_regs(sc);
        release_k(0);
        softmax_tile<kBN, kCausal>(sc, m_run, l_run, alpha, (n_blocks - 1) * kBN, T, row_lo, row0, t, sl2);
        pack_p<kBN>(pa, sc);
      }
      for (int it = 1; it < n_blocks; ++it) {
        mbar_wait(full_k + stage(it), parity(it));
        float sc[kBN / 2];
        turn_wait();
        issue_s(sc, it);
        rescale_o<kD, Tr::kSkipUnitRescale>(o, alpha);
        mbar_wait(full_v + stage(it - 1), parity(it - 1));
        issue_pv(pa, it - 1);
        turn_pass(it);
        wgmma_wait<1>();
        fence_regs(sc);
        release_k(it);
        softmax_tile<kBN, kCausal>(sc, m_run, l_run, alpha, (n_blocks - 1 - it) * kBN, T, row_lo, row0, t, sl2);
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(sc);  // keeps the repack of P (pa: the in-flight P V's A registers) after the wait
        mbar_arrive(empty_v + stage(it - 1));
        pack_p<kBN>(pa, sc);
      }
      rescale_o<kD, Tr::kSkipUnitRescale>(o, alpha);
      mbar_wait(full_v + stage(n_blocks - 1), parity(n_blocks - 1));
      issue_pv(pa, n_blocks - 1);
      wgmma_wait<0>();
      fence_regs(o);
      mbar_arrive(empty_v + stage(n_blocks - 1));
    }

    const int64_t o_off = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_run[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = row0 + r * 8;
      if (row >= T) continue;
      const float inv = 1.f / l;
      const int64_t ro = o_off + int64_t(row) * p.o_row_stride;
#pragma unroll
      for (int jj = 0; jj < kD / 8; ++jj)
        store_pair(p.o, ro + jj * 8 + 2 * t, p.o_f32, o[4 * jj + 2 * r] * inv, o[4 * jj + 2 * r + 1] * inv);
      // one rounding (fmaf), whatever the surrounding code: a contraction left to the compiler differed between
      // the loop variants in the last bit of L
      if (t == 0) p.lse[(int64_t(b) * p.num_heads + h) * T + row] = fmaf(m_run[r], 0.6931471805599453f, logf(l));
    }
    kv0 += n_blocks;
  };
  if constexpr (!Tr::kPersistent) {
    const TileCoord c = tile_coord(p);
    if (c.b >= p.batch) return;  // past the last (b, h) pair (the last group of tile_grid)
    mbar_wait(q_full, 0);
    run_tile(c);
  } else {
    for (int j = 0;; ++j) {
      mbar_wait(q_full, uint32_t(j & 1));
      const int L = *static_cast<volatile int*>(tile_slot);
      if (L >= total) break;
      run_tile(fwd_tile_at(p, L, tiles));
    }
  }
}

}  // namespace trainer::flash::sm90
