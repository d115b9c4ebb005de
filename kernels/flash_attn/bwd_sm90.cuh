// FlashAttention backward for Hopper (sm_90a): warpgroup MMAs (wgmma) from 128B-swizzled shared memory, warp
// specialization, TMA loads and mbarrier pipelines.
// Algorithm: FlashAttention-2 backward (Dao 2023, arXiv:2307.08691, Algorithm 2: recomputation with L and
// D = rowsum(dO o O) precomputed; P = exp(S - L), dV += Pᵀ dO, dP = dO Vᵀ, dS = P o (dP - D), dK += dSᵀ Q,
// dQ += dS K, the scale folded into dK and dQ); structure after FlashAttention-3 (Shah et al. 2024,
// arXiv:2407.08608, sections 3.1 and B.2): the transposed scores are computed directly, Sᵀ = K Qᵀ and dPᵀ = V dOᵀ
// (K-major operands), so that Pᵀ and dSᵀ sit in registers in the layout of an A operand, and dV += Pᵀ dO,
// dK += dSᵀ Q read dO and Q as N-major B operands; dSᵀ is also stored to shared memory, where it is the M-major A
// operand of dQ = dS K.
//
// One CTA per (key tile of kBN = 128 keys, head, batch), in the tile kernels' order (tile_coord, params.h: the
// longest (causal) key tiles of a group of heads first); 384 threads:
//  - warpgroup 0 is the producer (setmaxnreg down to kRegsProducer): its warp 0 streams the query tiles (kBM = 64
//    queries: Q, dO by TMA, L, D by cp.async) through kStages shared stages guarded by mbarriers (full: the
//    transaction bytes and the cp.async arrivals; empty: every consumer thread, once its wgmma reading the stage are
//    done); lane 0 of its warp 1 adds each finished f32 dQ tile into dq_accum with one bulk reduction
//    (cp.reduce.async.bulk .add.f32; dq_full / dq_empty), or, where p.dq_tile_state is given and the tile's first
//    contribution is this CTA's, stores it (cp.async.bulk), so that dq_accum needs no zeroing (the dQ tile words'
//    protocol below, twenty-fifth session); in deterministic mode (p.dq_ordered, forty-eighth session) it adds in
//    key-tile order instead, each tile's word counting the contributions in (dq_tile_wait_turn);
//  - warpgroups 1 and 2 are the consumers (setmaxnreg up to kRegsConsumer): consumer c owns keys 64c .. 64c+63 of
//    the tile and accumulates their dK, dV in registers over the query tiles. Per query tile: Sᵀ and dPᵀ as two wgmma
//    groups, so that Pᵀ is computed while dPᵀ runs; dV += Pᵀ dO issued before dSᵀ is computed; dK += dSᵀ Q. dQ of a
//    query tile needs both consumers' dSᵀ (consumer c computes its kD / 2 columns over all 128 keys), so it is
//    computed one query tile late, after the consumer's next Sᵀ ... dK are issued: dSᵀ goes through two shared
//    stages with their own mbarriers (ds_full: both consumers wrote it; ds_empty: both read it), and a consumer
//    waits for the other only when that one is a whole query tile behind. No CTA barrier runs in the loop, so one
//    consumer's exp / dS work runs under the other's wgmma.
// The dQ tile's rows keep dq_accum's layout with 16-byte chunks swizzled (dq_swizzle, params.h), so that each
// half-warp's fragment stores hit every bank once (a 2-way conflict until the twenty-first session; NOTES.md). Causal: query tiles that end before the key tile starts are never visited; the mask
// runs only on tiles that need it.
// Measured (one H200, 16 heads x d 64, T 16384, causal): 3.41 ms against 4.21 for the previous design (the same
// products with both warpgroups meeting at two CTA barriers per query tile, all threads loading by cp.async);
// kernels/flash_attn/NOTES.md, "warp specialization".
// d 64 takes query tiles of 128 (BwdTraits kBM 128, twentieth session): Sᵀ, dPᵀ as m64n128 products, dV, dK over
// 128 queries a tile, and dQ split by rows instead of columns (consumer c: its 64 queries, every column, over all
// 128 keys; dSᵀ is then two 64-query sub-tiles, one per consumer's A operand). For registers, dS = P o (dP - D) takes
// Pᵀ as rounded to bf16 for dV (not the f32 value), L and D are read from shared memory where they are used, and
// the f32 dQ tile has one stage (shared memory). 16 heads, T 16384, causal: 3.01-3.17 ms against 3.43-3.55.
// d 80 (xl): d 128's shared layout (two 64-column sub-tiles, zero-filled past column 80) with products over 80
// columns (Sᵀ, dPᵀ as five k16 steps; dV, dK as m64n80); the dQ columns of the second warpgroup, 40..79, cross the
// sub-tile edge, so they are two products (40..63, 64..79). 4 x 32 heads, T 16384, causal: 35.4 ms = 388 TFLOP/s,
// against 74.6 on the mma.sync kernel (v10 notes). d 96 the same way: Sᵀ, dPᵀ as six k16 steps, dV, dK as m64n96,
// the first warpgroup's dQ columns 0..47 as one product, the second's 48..95 as two (48..63, 64..95).
#pragma once
#include <type_traits>

#include "backend/cuda_sizes.h"
#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_sm90.cuh"
#include "sm90/barriers.cuh"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace trainer::flash::sm90 {

/// Tile configuration: 128 keys per CTA (two consumer warpgroups of 64) x query tiles of 64; kD: head dim (64, 80, 96
/// or 128; 80 and 96 are stored as two sub-tiles, sm90_subtiles); kStages: Q / dO / L / D stages; kRegsProducer /
/// kRegsConsumer: setmaxnreg budgets (128 threads each; together at most 3 x 168, the register count of
/// __launch_bounds__(384, 1)).
/// kBM_: queries per tile, 64, or 128 at d 64 (then each consumer computes the dQ rows of its 64 queries over all
/// columns, dSᵀ is two 64-query sub-tiles, Pᵀ in dS = P o (dP - D) is the bf16 Pᵀ of the dV product, and L, D are
/// read from shared memory where they are used: registers); kDqStages_: stages of the f32 dQ tile.
template <int kD_, int kStages_ = 2, int kRegsProducer_ = 40, int kRegsConsumer_ = 232, int kBM_ = 64,
          int kDqStages_ = 2>
struct BwdTraits {
  static constexpr int kD = kD_, kWG = 2, kBN = 64 * kWG, kBM = kBM_, kThreads = 128 * (kWG + 1);
  static constexpr int kStages = kStages_, kDsStages = 2, kDqStages = kDqStages_;
  static constexpr int kRegsProducer = kRegsProducer_, kRegsConsumer = kRegsConsumer_;
  static constexpr int kSub = sm90_subtiles(kD);
  static constexpr bool kWide = kBM == 128;  // the 128-query tile (rows of dQ per consumer, bf16 Pᵀ in dS)
  static_assert(kBM == 64 || (kWide && kD == 64), "query tiles of 64, or of 128 at d 64");
  static constexpr int kDqN = kWide ? kD : kD / kWG;  // dQ columns per consumer warpgroup
  // The second warpgroup's dQ columns kDqN .. 2 kDqN - 1 cross a 64-column sub-tile edge (d 80: 40..79; d 96: 48..95)
  static constexpr bool kDqCrossesSubtile = !kWide && kDqN % 64 != 0 && kDqN / 64 != (2 * kDqN - 1) / 64;
  // K / V and Q / dO tiles as TMA boxes of 64 columns (d 80: incl. the zero fill), dSᵀ
  static constexpr int kKBytes = kBN * 64 * kSub * 2, kQBytes = kBM * 64 * kSub * 2, kDsBytes = kBN * kBM * 2;
  static constexpr int kBarriers = 2 * (kStages + kDsStages + kDqStages);
  // K, V; stages of Q, dO, L, D; stages of dSᵀ and of the dQ tile (f32); mbarriers; alignment slack
  static constexpr int kSmemBytes = 2 * kKBytes + kStages * (2 * kQBytes + 2 * kBM * 4) + kDsStages * kDsBytes +
                                    kDqStages * kBM * kD * 4 + 8 * kBarriers + 1024;
  static_assert((kD == 64 || kD == 80 || kD == 96 || kD == 128) && kDqN % 8 == 0 && kDqN <= 64, "wgmma tiles");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one sm_90 CTA");
  static constexpr int kRegsLaunch = (65536 / kThreads) & ~7;  // 168 under __launch_bounds__(384, 1)
  static_assert(kRegsProducer <= kRegsLaunch && kRegsConsumer >= kRegsLaunch &&
                    kRegsProducer + kWG * kRegsConsumer <= (kWG + 1) * kRegsLaunch && kRegsProducer % 8 == 0 &&
                    kRegsConsumer % 8 == 0,
                "setmaxnreg: the producer gives registers up, the consumers take at most what it gave");
};

/// 4 bytes global -> shared, asynchronously; valid = false writes zeros.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0));
}

/// dst[i] += src[i] for `bytes` / 4 floats, global += shared, by the bulk copy engine (one thread issues it; PTX
/// cp.reduce.async.bulk, sm_90): one committed bulk group. dst and bytes 16-byte aligned.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_addr(src)), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/// Waits until at most N of this thread's bulk groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/// Waits until all of this thread's bulk groups are complete.
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/// dst[i] = src[i] for `bytes` / 4 floats, global = shared, by the bulk copy engine (PTX cp.async.bulk, sm_90): one
/// committed bulk group. dst and bytes 16-byte aligned.
__device__ __forceinline__ void bulk_store_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(smem_addr(src)),
               "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/// The dQ tile words' protocol (FlashBwdParams::dq_tile_state), run by the dQ warp's issuing lane: the first
/// contribution to a tile (ticket 0) stores it into dq_accum, which then needs no zeroing; every later one adds, once
/// the first is in. Between its ticket and its ready bit the first's lane waits for its own bulk operations only,
/// never for another CTA, so no CTA waits on one that waits on it. kDqReady: the ready bit.
/// Measured (ncu, one H200, against the same kernel with the zeroing; results/h200/2026-12-04/v25/call4): the
/// backward's three launches -0.7% at 16 x 128, T 16384 (the preprocess 75 -> 56 us), -1.3% at xl's 4 x 32 x 80,
/// T 2048, +0.8% at T 512 (the kernel +4%: the ticket's round trip and the store's completion on the dQ warp's path
/// every tile), +0.6% at small's 4 x 12 x 64.
constexpr unsigned kDqReady = 1u << 31;
/// This contribution's ticket on tile word w (relaxed): 0 for the first.
__device__ __forceinline__ unsigned dq_tile_ticket(unsigned* w) { return atomicAdd(w, 1u); }
/// After this thread's bulk store of a tile is complete (bulk_wait_all): the store's writes (async proxy) ordered
/// before the release of the ready bit on w.
__device__ __forceinline__ void dq_tile_publish(unsigned* w) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.or.b32 [%0], %1;\n" ::"l"(w), "r"(kDqReady) : "memory");
}
/// Waits (acquire) until w's ready bit is set, then orders this thread's later bulk reductions (async proxy) after it.
__device__ __forceinline__ void dq_tile_wait_ready(const unsigned* w) {
  for (;;) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(w) : "memory");
    if (v & kDqReady) break;
    __nanosleep(64);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/// The ordered form of the protocol (FlashBwdParams::dq_ordered, the deterministic mode): the contributions to a dQ
/// tile go in in key-tile order, so dq_accum's fp32 sums are the same every run. The tile's word counts the
/// contributions in: key tile n (its n-th contributor, for every mask: key tiles 0 .. n - 1 all reach the query tiles
/// that key tile n reaches) waits until the word is n, stores (n = 0) or adds its tile, waits for that operation to
/// complete and adds 1 to the word. A CTA waits only for CTAs of the same head with lower key tiles, which start
/// before it (tile_coord: tile t of a group of heads before tile t + 1; CTAs start in blockIdx order, which
/// FlashAttention-3's deterministic backward relies on as well), and those wait only for lower ones: no cycle.
/// Waits (acquire) until w holds `turn`, then orders this thread's later bulk operations (async proxy) after it.
__device__ __forceinline__ void dq_tile_wait_turn(const unsigned* w, unsigned turn) {
  for (;;) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(w) : "memory");
    if (v == turn) break;
    __nanosleep(32);
  }
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
/// After this thread's bulk store or reduction of a tile is complete (bulk_wait_all): its writes (async proxy)
/// ordered before the release of the next turn on w.
__device__ __forceinline__ void dq_tile_pass_turn(unsigned* w) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(w) : "memory");
}

/// Epilogue of the Hopper backward kernel: this thread's dK = scale · dk and dV = dv accumulators (the m64nkD
/// layout of its warpgroup: rows key0 and key0 + 8, columns 8j + 2t, +1) into the gradients' dtype; kSplit: added
/// into the f32 accumulators p.dkv_accum instead. Rows >= T are skipped.
template <int kD, bool kSplit>
__device__ __forceinline__ void store_dkdv(const FlashBwdParams& p, const float (&dk)[kD / 2], const float (&dv)[kD / 2],
                                           int key0, int b, int h, int t) {
  using bf16 = __nv_bfloat16;
  const int T = p.seq_len;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  // (The dtype branch stays outside the loops, not store_pair's per pair: the d 128 build is at
  // its register limit and spilled 4 bytes with store_pair.)
  if constexpr (kSplit) {
    float* gdk = p.dkv_accum + bh * T * kD;
    float* gdv = gdk + int64_t(p.batch) * p.num_heads * T * kD;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key >= T) continue;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const int64_t e = int64_t(key) * kD + 8 * j + 2 * t;
        atomicAdd(reinterpret_cast<float2*>(gdk + e),
                  make_float2(dk[4 * j + 2 * r] * p.softmax_scale, dk[4 * j + 2 * r + 1] * p.softmax_scale));
        atomicAdd(reinterpret_cast<float2*>(gdv + e), make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]));
      }
    }
    return;
  }
  const int64_t doff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= T) continue;
    const int64_t ro = doff + int64_t(key) * p.dqkv_row_stride;
    if (p.dqkv_f32) {
      float* gk_ = static_cast<float*>(p.dk) + ro;
      float* gv_ = static_cast<float*>(p.dv) + ro;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<float2*>(gk_ + 8 * j + 2 * t) =
            make_float2(dk[4 * j + 2 * r] * p.softmax_scale, dk[4 * j + 2 * r + 1] * p.softmax_scale);
        *reinterpret_cast<float2*>(gv_ + 8 * j + 2 * t) = make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    } else {
      bf16* gk_ = static_cast<bf16*>(p.dk) + ro;
      bf16* gv_ = static_cast<bf16*>(p.dv) + ro;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(gk_ + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dk[4 * j + 2 * r] * p.softmax_scale, dk[4 * j + 2 * r + 1] * p.softmax_scale);
        *reinterpret_cast<__nv_bfloat162*>(gv_ + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    }
  }
}

/// dK, dV (bf16, or f32 when p.dqkv_f32) from bf16 q, k, v, dO views (TMA tensor maps `tma` of the same views,
/// launch_sm90.cuh), lse and p.dsum = D [B, H, T] (the preprocess pass), adding dS K into p.dq_accum (f32 [B, H, T,
/// d], rows swizzled as dq_swizzle, 16-byte aligned: the convert pass turns it into dQ; zeroed by the preprocess,
/// or, with p.dq_tile_state (its words zeroed), each tile's first contribution stored); d = Tr::kD, T >= 1.
/// Grid tile_grid(p, ceil(T / kBN) x splits) (launch.h; CTA order tile_coord), Tr::kThreads threads,
/// Tr::kSmemBytes of dynamic shared memory. sm_90a only.
/// kSplit: the split-queries build for problems with few key tiles (tiles = key tiles x chunks of p.dkdv_chunk
/// query tiles; each CTA adds its partial dK·scale and dV into the f32 accumulators p.dkv_accum, which the convert
/// pass writes out), as flash_bwd_dkdv_kernel; without it the split code compiles away.
template <class Tr, bool kCausal, bool kSplit = false>
__global__ void __launch_bounds__(Tr::kThreads, 1)
    flash_bwd_sm90_kernel(const FlashBwdParams p, const __grid_constant__ TmaMaps tma) {
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kSub = Tr::kSub, kStages = Tr::kStages;
  constexpr int kDqN = Tr::kDqN, kDsStages = Tr::kDsStages, kDqStages = Tr::kDqStages;
  constexpr int kConsumers = 128 * Tr::kWG;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sK = align_smem_1024(smem_raw);
  uint8_t* sV = sK + Tr::kKBytes;
  uint8_t* sQ = sV + Tr::kKBytes;              // [kStages][kSub][kBM][64]
  uint8_t* sdO = sQ + kStages * Tr::kQBytes;   // [kStages][kSub][kBM][64]
  uint8_t* sdS = sdO + kStages * Tr::kQBytes;  // [kDsStages][kBM / 64][kBN keys][64 queries] (dSᵀ)
  float* sL = reinterpret_cast<float*>(sdS + kDsStages * Tr::kDsBytes);  // [kStages][kBM]
  float* sDs = sL + kStages * kBM;                                       // [kStages][kBM]
  float* sdQ = sDs + kStages * kBM;  // [kDqStages][kBM][kD] f32, dq_accum's row layout (16-byte aligned)
  uint64_t* full = reinterpret_cast<uint64_t*>(sdQ + kDqStages * kBM * kD);
  uint64_t* empty = full + kStages;
  uint64_t* ds_full = empty + kStages;
  uint64_t* ds_empty = ds_full + kDsStages;
  uint64_t* dq_full = ds_empty + kDsStages;
  uint64_t* dq_empty = dq_full + kDqStages;

  const int T = p.seq_len;
  const TileCoord tc = tile_coord(p);  // the tile kernels' CTA order: tile t of a group of heads before tile t + 1
  if (tc.b >= p.batch) return;         // past the last (batch, head) pair of the last group
  const int splits = kSplit ? tc.tiles / ((T + kBN - 1) / kBN) : 1;
  const int n_block = tc.tile / splits;  // low key tiles see the most queries (causal): first
  const int split = tc.tile % splits;
  const int h = tc.h, b = tc.b;
  const int n0 = n_block * kBN;
  int m_lo = kCausal ? n0 / kBM : 0, m_hi = (T + kBM - 1) / kBM;
  if (kSplit) {  // this CTA's chunk of the query loop; a chunk past the end has nothing to do (the whole CTA leaves)
    m_lo += split * p.dkdv_chunk;
    if (m_lo >= m_hi) return;
    m_hi = min(m_hi, m_lo + p.dkdv_chunk);
  }
  const int n_tiles = m_hi - m_lo;
  // the deterministic mode (p.dq_ordered; never split): the query tiles from the last down, so that every key tile
  // of a head reaches a query tile at about the same step and its contributions, which go in in key-tile order, wait
  // about one bulk reduction each (ascending, key tile n would reach query tile n at its first step and key tile 0 at
  // its n-th: n tiles of waiting)
  const bool ordered = !kSplit && p.dq_ordered;
  auto tile_m = [&](int i) { return ordered ? m_hi - 1 - i : m_lo + i; };
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 33);  // the loader's 32 lanes (cp.async of L, D) and its TMA-issuing lane
      mbar_init(empty + s, kConsumers);
    }
    for (int s = 0; s < kDsStages; ++s) {
      mbar_init(ds_full + s, kConsumers);
      mbar_init(ds_empty + s, kConsumers);
    }
    for (int s = 0; s < kDqStages; ++s) {
      mbar_init(dq_full + s, kConsumers);
      mbar_init(dq_empty + s, 1);  // the dQ warp's issuing lane
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producer warpgroup ----
    setmaxnreg_dec<Tr::kRegsProducer>();
    if (warp == 0) {  // loader: K, V with the first stage, then Q / dO / L / D per query tile
      const float* glse = p.lse + bh * T;
      const float* gdsum = p.dsum + bh * T;
      for (int i = 0; i < n_tiles; ++i) {
        const int s = i % kStages, m = tile_m(i);
        mbar_wait(empty + s, ((i / kStages) & 1) ^ 1);  // released by the consumers (free before its first use)
        if (lane == 0) {  // K, V (with the first tile), Q, dO by TMA: rows past T arrive as zeros
          mbar_arrive_expect_tx(full + s, uint32_t(2 * Tr::kQBytes + (i == 0 ? 2 * Tr::kKBytes : 0)));
#pragma unroll
          for (int sub = 0; sub < kSub; ++sub) {
            if (i == 0) {
              tma_load_4d(sK + sub * kBN * 128, &tma.k, 64 * sub, n0, h, b, full + s);
              tma_load_4d(sV + sub * kBN * 128, &tma.v, 64 * sub, n0, h, b, full + s);
            }
            tma_load_4d(sQ + s * Tr::kQBytes + sub * kBM * 128, &tma.q, 64 * sub, m * kBM, h, b, full + s);
            tma_load_4d(sdO + s * Tr::kQBytes + sub * kBM * 128, &tma.dout, 64 * sub, m * kBM, h, b, full + s);
          }
        }
#pragma unroll
        for (int r = lane; r < kBM; r += 32) {  // L, D by cp.async (rows past T: zeros)
          const int q = m * kBM + r;
          cp_async_4(sL + s * kBM + r, glse + (q < T ? q : 0), q < T);
          cp_async_4(sDs + s * kBM + r, gdsum + (q < T ? q : 0), q < T);
        }
        mbar_arrive_cp_async(full + s);
      }
    } else if (warp == 1 && lane == 0) {  // dQ: each finished tile into dq_accum by one bulk store or reduction
      float* gdq = p.dq_accum + bh * T * kD;
      // with dq_tile_state: the first contribution to a tile stores it, the others add it once it is in (kDqReady)
      unsigned* words =
          p.dq_tile_state ? p.dq_tile_state + bh * cuda_sizes::flash_dq_tile_words_per_head(T) : nullptr;
      for (int i = 0; i < n_tiles; ++i) {
        const int j = i % kDqStages, m = tile_m(i);
        float* dst = gdq + int64_t(m) * kBM * kD;
        const float* src = sdQ + j * kBM * kD;
        const uint32_t bytes = uint32_t(min(kBM, T - m * kBM) * kD * 4);
        mbar_wait(dq_full + j, (i / kDqStages) & 1);
        if (ordered) {  // this key tile's turn on the tile (words non-null: the launcher binds them)
          dq_tile_wait_turn(words + m, unsigned(n_block));
          if (n_block == 0) bulk_store_f32(dst, src, bytes);
          else bulk_reduce_add_f32(dst, src, bytes);
          bulk_wait_read<0>();
          mbar_arrive(dq_empty + j);
          bulk_wait_all();
          dq_tile_pass_turn(words + m);
          continue;
        }
        const bool first = words && dq_tile_ticket(words + m) == 0u;
        if (first) {
          bulk_store_f32(dst, src, bytes);
        } else {
          if (words) dq_tile_wait_ready(words + m);
          bulk_reduce_add_f32(dst, src, bytes);
        }
        bulk_wait_read<0>();
        mbar_arrive(dq_empty + j);
        if (first) {  // the store complete (and the reductions before it), then the tile's ready bit
          bulk_wait_all();
          dq_tile_publish(words + m);
        }
      }
      bulk_wait_all();
    }
    return;
  }

  // ---- consumer warpgroups: c owns keys n0 + 64c .. +63 and dQ columns c kDqN .. +kDqN-1 ----
  setmaxnreg_inc<Tr::kRegsConsumer>();
  const int c = wg - 1, g = lane / 4, t = lane % 4;
  float dv[kD / 2], dk[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dv[i] = dk[i] = 0.f;
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scale·log2(e)
  const int key0 = n0 + 64 * c + 16 * warp + g;             // this thread's keys: key0 and key0 + 8
  const uint32_t kw_off = uint32_t(64 * c * 128);           // this warpgroup's 64 key rows inside K / V / dSᵀ
  // its dQ columns in K (the 128-query tile: all columns, and its 64 queries' sub-tile of dSᵀ)
  const uint32_t dq_b_off = Tr::kWide ? 0u : uint32_t((c * kDqN) / 64 * (kBN * 128) + (c * kDqN) % 64 * 2);
  const uint64_t k_desc = make_desc(smem_addr(sK) + kw_off, 16, 1024);
  const uint64_t v_desc = make_desc(smem_addr(sV) + kw_off, 16, 1024);
  const uint64_t q_desc = make_desc(smem_addr(sQ), 16, 1024), do_desc = make_desc(smem_addr(sdO), 16, 1024);
  const uint64_t q_desc_n = make_desc(smem_addr(sQ), kBM * 128, 1024);
  const uint64_t do_desc_n = make_desc(smem_addr(sdO), kBM * 128, 1024);
  const uint64_t ds_desc = Tr::kWide ? make_desc(smem_addr(sdS) + uint32_t(c * kBN * 128), kBN * 128, 1024)
                                     : make_desc(smem_addr(sdS), kBM * 128, 1024);  // M-major A of dQ (stage 0)
  const uint64_t kq_desc_n = make_desc(smem_addr(sK) + dq_b_off, kBN * 128, 1024);  // N-major B of dQ

  // Hand-offs to the other warpgroup and to the dQ warp: a fence.proxy.async waits for this thread's shared stores
  // to land, so each one is issued after some other work (the dSᵀ tile's after the dK products are issued, the dQ
  // tile's after the next query tile's Sᵀ / dPᵀ are).
  int dq_pending = -1;  // a dQ tile stored but not yet handed to the dQ warp
  auto publish_dq = [&] {
    if (dq_pending >= 0) {
      fence_proxy_async();
      mbar_arrive(dq_full + dq_pending % kDqStages);
      dq_pending = -1;
    }
  };
  // Once this warpgroup's dQ products of query tile i are done: releases their dSᵀ stage d and returns the dQ tile
  // stage to store into (after the dQ warp has read that stage's previous tile).
  auto dq_tile_stage = [&](int d, int i) {
    mbar_arrive(ds_empty + d);
    const int jq = i % kDqStages;
    if (i >= kDqStages) mbar_wait(dq_empty + jq, ((i / kDqStages) - 1) & 1);
    return sdQ + jq * kBM * kD;
  };
  // This thread's half-row r of an m64nN dQ accumulator (row `row` of the tile, columns col0 + 8j + 2t, +1) into the
  // dQ tile row dst, 16-byte chunks swizzled as dq_swizzle.
  auto store_dq_row = [&](float* dst, int row, int r, int col0, const auto& acc) {
    constexpr int kN = 2 * int(std::extent_v<std::remove_reference_t<decltype(acc)>>);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
      *reinterpret_cast<float2*>(dst + dq_swizzle(row, col0 + 8 * j + 2 * t, kD)) =
          make_float2(acc[4 * j + 2 * r], acc[4 * j + 2 * r + 1]);
  };
  // dQ of the i-th query tile (both warpgroups' dSᵀ in stage i % kDsStages), this warpgroup's columns, into the dQ
  // tile (once the dQ warp has read that stage's previous tile); handed over by publish_dq.
  auto dq_tile_one = [&](int i) {
    const int d = i % kDsStages;
    mbar_wait(ds_full + d, (i / kDsStages) & 1);
    float dq[kDqN / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_ss<1, 1, kDqN>(dq, desc_add(ds_desc, d * Tr::kDsBytes + kk * 2048), desc_add(kq_desc_n, kk * 2048),
                           kk > 0);
    wgmma_commit();
    wgmma_wait<0>();  // also every earlier group of this warpgroup (dV, dK)
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq);
    float* sdq = dq_tile_stage(d, i);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (Tr::kWide) {  // this warpgroup's 64 query rows, every column
        const int row = 64 * c + 16 * warp + g + 8 * r;
        store_dq_row(sdq + row * kD, row, r, 0, dq);
      } else {
        const int row = 16 * warp + g + 8 * r;
        store_dq_row(sdq + row * kD, row, r, c * kDqN, dq);
      }
    }
    dq_pending = i;
  };
  // The same where the second warpgroup's columns cross the sub-tile edge (kDqCrossesSubtile, d 80 and 96): an
  // N-major operand cannot run across it from inside a sub-tile, so that warpgroup's columns are two products (d 80:
  // 40..63 and 64..79; d 96: 48..63 and 64..95) (kc: the warpgroup, compile-time; kq_desc_n is then K's start,
  // dq_b_off 0 for warpgroup 0).
  auto dq_tile_split = [&](auto kc, int i) {
    constexpr int lo = decltype(kc)::value * kDqN, hi = lo + kDqN, edge = (lo / 64 + 1) * 64;
    constexpr int mid = hi < edge ? hi : edge;
    constexpr int n1 = mid - lo, n2 = hi - mid;
    const uint64_t kq0 = make_desc(smem_addr(sK), kBN * 128, 1024);
    const int d = i % kDsStages;
    mbar_wait(ds_full + d, (i / kDsStages) & 1);
    float dq1[n1 / 2], dq2[n2 > 0 ? n2 / 2 : 1];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_ss<1, 1, n1>(dq1, desc_add(ds_desc, d * Tr::kDsBytes + kk * 2048),
                         desc_add(kq0, (lo / 64) * (kBN * 128) + (lo % 64) * 2 + kk * 2048), kk > 0);
    if constexpr (n2 > 0) {
#pragma unroll
      for (int kk = 0; kk < kBN / 16; ++kk)
        wgmma_ss<1, 1, n2>(dq2, desc_add(ds_desc, d * Tr::kDsBytes + kk * 2048),
                           desc_add(kq0, (mid / 64) * (kBN * 128) + kk * 2048), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();  // also every earlier group of this warpgroup (dV, dK)
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq1);
    if constexpr (n2 > 0) fence_regs(dq2);
    float* sdq = dq_tile_stage(d, i);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = 16 * warp + g + 8 * r;
      store_dq_row(sdq + row * kD, row, r, lo, dq1);
      if constexpr (n2 > 0) store_dq_row(sdq + row * kD, row, r, mid, dq2);
    }
    dq_pending = i;
  };
  auto dq_tile = [&](int i) {
    if constexpr (Tr::kDqCrossesSubtile) {
      if (c == 0) dq_tile_split(std::integral_constant<int, 0>{}, i);
      else dq_tile_split(std::integral_constant<int, 1>{}, i);
    } else {
      dq_tile_one(i);
    }
  };

  for (int i = 0; i < n_tiles; ++i) {
    const int m = tile_m(i), s = i % kStages, q0 = m * kBM;
    const uint32_t stage = uint32_t(s * Tr::kQBytes);
    mbar_wait(full + s, (i / kStages) & 1);
    // -L·log2(e) of this thread's query columns 8j + 2t, +1, read before the products so that the loads overlap them
    // (the 128-query tile: where they are used, for registers)
    float nl[Tr::kWide ? 2 : kBM / 4];
    if constexpr (!Tr::kWide) {
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j) {
        const float2 l2 = *reinterpret_cast<const float2*>(sL + s * kBM + 8 * j + 2 * t);
        nl[2 * j] = -l2.x * kLog2e;
        nl[2 * j + 1] = -l2.y * kLog2e;
      }
    }
    float st[kBM / 2], dpt[kBM / 2];
    wgmma_fence();
    wgmma_kmajor<kBM, kD>(st, k_desc, kBN * 128, desc_add(q_desc, stage), kBM * 128);
    wgmma_commit();
    wgmma_kmajor<kBM, kD>(dpt, v_desc, kBN * 128, desc_add(do_desc, stage), kBM * 128);
    wgmma_commit();
    publish_dq();

    const bool need_mask = (kCausal && n0 + kBN - 1 > q0) || q0 + kBM > T || n0 + kBN > T;
    uint32_t pa[kBM / 16][4], da[kBM / 16][4];
    wgmma_wait<1>();  // Sᵀ
    fence_regs(st);
    // Pᵀ = exp(scale·Sᵀ - L) (0 where masked), per (key row, query column).
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
      if constexpr (Tr::kWide) {
        const float2 l2 = *reinterpret_cast<const float2*>(sL + s * kBM + 8 * j + 2 * t);
        nl[0] = -l2.x * kLog2e;
        nl[1] = -l2.y * kLog2e;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pv = exp2_fast(fmaf(st[4 * j + e], sl2, nl[Tr::kWide ? (e & 1) : 2 * j + (e & 1)]));
        if (need_mask) {
          const int key = key0 + (e >> 1) * 8, q = q0 + 8 * j + 2 * t + (e & 1);
          if (q >= T || key >= T || (kCausal && key > q)) pv = 0.f;
        }
        st[4 * j + e] = pv;
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = pack_bf16(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);
    // dV += Pᵀ dO: A from registers, dO N-major.
    fence_regs(dv);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
      wgmma_rs<1, kD>(dv, pa[kk], desc_add(do_desc_n, stage + kk * 2048), true);
    wgmma_commit();
    float2 dd[Tr::kWide ? 1 : kBM / 8];  // D of the query columns, read while dPᵀ may still run (not kWide)
    if constexpr (!Tr::kWide) {
#pragma unroll
      for (int j = 0; j < kBM / 8; ++j) dd[j] = *reinterpret_cast<const float2*>(sDs + s * kBM + 8 * j + 2 * t);
    }
    wgmma_wait<1>();  // dPᵀ (dV may still run)
    fence_regs(dpt);
    // dSᵀ = Pᵀ o (dPᵀ - D) (the 128-query tile: Pᵀ as rounded to bf16 for dV, pa[j / 2][2 (j % 2) + e / 2]).
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
      if constexpr (Tr::kWide) dd[0] = *reinterpret_cast<const float2*>(sDs + s * kBM + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pv;
        if constexpr (Tr::kWide) {
          const uint32_t w = pa[j / 2][2 * (j % 2) + e / 2];
          pv = __uint_as_float((e & 1) ? (w & 0xffff0000u) : (w << 16));
        } else {
          pv = st[4 * j + e];
        }
        const float2 dj = dd[Tr::kWide ? 0 : j];
        dpt[4 * j + e] = pv * (dpt[4 * j + e] - ((e & 1) ? dj.y : dj.x));
      }
    }
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) da[kk][r] = pack_bf16(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
    // dSᵀ -> this warpgroup's rows of dSᵀ stage i % kDsStages, once both warpgroups have read its previous tile.
    const int d = i % kDsStages;
    if (i >= kDsStages) mbar_wait(ds_empty + d, ((i / kDsStages) - 1) & 1);
    {
      uint8_t* ds = sdS + d * Tr::kDsBytes;
      const int r0 = 64 * c + 16 * warp + g;
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // 16-byte chunk ch of the row: sub-tile ch / 8 (two at 128 queries)
          const int ch = 2 * kk + (r >> 1);
          *reinterpret_cast<uint32_t*>(ds + (ch / 8) * (kBN * 128) + sw128_offset(r0 + 8 * (r & 1), ch % 8) + 4 * t) =
              da[kk][r];
        }
    }
    // dK += dSᵀ Q: A from registers, Q N-major.
    fence_regs(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
      wgmma_rs<1, kD>(dk, da[kk], desc_add(q_desc_n, stage + kk * 2048), true);
    wgmma_commit();
    fence_proxy_async();  // this warpgroup's dSᵀ rows, for both warpgroups' dQ products
    mbar_arrive(ds_full + d);
    if (i > 0) {
      dq_tile(i - 1);  // waits for all of this warpgroup's wgmma: this stage's dV, dK are done too
    } else {
      wgmma_wait<0>();
      fence_regs(dv);
      fence_regs(dk);
    }
    mbar_arrive(empty + s);  // done with this stage's Q, dO, L, D
  }
  publish_dq();
  dq_tile(n_tiles - 1);
  publish_dq();
  store_dkdv<kD, kSplit>(p, dk, dv, key0, b, h, t);
}

}  // namespace trainer::flash::sm90
