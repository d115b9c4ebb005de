// dW = dYᵀ X with AdamW in the epilogue (dw_adamw.h), for Hopper (sm_90a): a persistent, warp-specialized wgmma
// GEMM whose two consumer warpgroups take the CTA's tiles in turn, so that one warpgroup's epilogue (AdamW: memory
// bound, 26 bytes a parameter) runs while the other's products (tensor cores) run. This is CUTLASS's "ping-pong"
// schedule (KernelTmaWarpSpecializedPingpong; FlashAttention-3, arXiv:2407.08608, section 3.1, uses it for the
// softmax); the building blocks (TMA loads, mbarriers, wgmma from 128B-swizzled shared memory) are kernels/sm90/'s,
// which the Hopper attention kernels share. Counts and the plan: kernels/dw_adamw/NOTES.md.
//
// Tiles of 128 (M) x 128 (N), numbered along the smaller of M and N first, so that the operand consecutive tiles walk
// is the smaller one and stays in L2 (n-fastest: tile L has rows 128 (L / TN), columns 128 (L % TN)). CTA c of G (one
// per SM) takes tiles c, c + G, ..., its j-th by consumer warpgroup j % 2. K runs in blocks of 64 through kStagesOf
// shared stages: A = dY's [64 K rows x 128 M columns] and B = X's [64 x 128 N], each two 64-column sub-tiles, both
// operands MN-major (dY and X are row-major [K, *]), as the attention backward's dQ = dS K reads dS and K.
// - Producer (warpgroup 0, one thread): TMA boxes of 64 x 64 into the stage, full[s] by transaction bytes, waiting
//   for empty[s] (every thread of the consumer that read the stage).
// - Consumers (warpgroups 1, 2): per K block, 2 x 4 wgmma m64n128k16 (rows 0..63 and 64..127 of the tile; 128 fp32
//   accumulators a thread), one commit group, the previous block's stage released after wait_group 1. A consumer
//   starts its tile's products only when the other has waited for all of its own tile's stages (named barriers 1
//   and 2): a stage's full barrier is then at most one phase ahead of any waiter (an mbarrier wait names a phase by
//   its parity only), and the two consumers' products do not interleave, so the epilogue of one overlaps the
//   products of the other.
// - Epilogue operands (p, m, v, and grad_in when given): a second producer thread (warp 1 of warpgroup 0) copies them
//   by TMA, in chunks of 16 rows x 128 columns (one 8 KB fp32 box per array, unswizzled: 512 contiguous bytes a row;
//   v33: 3% faster than v28c's 64 x 32 chunks), into a ring of kEpiSlots shared slots, in the CTA's tile order; it
//   runs ahead of the epilogues by the ring's size, so a tile's first chunks arrive during its products and the rest
//   stream under the epilogue. v27's register loads (a thread's few float2 in flight) reached 1.3 TB/s (v28: ncu, 68%
//   L2 hits); the ring holds 96 KB of boxes per SM with the update, 32 without (kEpiSlots).
// - Epilogue: thread (warp w, lane g*4+t) holds rows 16w + g (+8) of each 64-row half and columns 8j + 2t, +1 (the
//   wgmma accumulator layout, sm90/wgmma.cuh), so chunk k (rows 16k..) is warp k % 4's rows of half k / 4. Per chunk
//   (epilogue_staged) that warp writes its accumulators into the slot's g box (with grad_in: their sums with grad_in's
//   elements, into grad_in's box in place), then the warpgroup takes the chunk as float4s in a runtime loop
//   (adamw_one per element, whole 512-byte row stores of p, m, v and p_work). v28b's register epilogue (each thread
//   updating its own column pairs from the slot) lost to the staged one: xl block 1.70 against 1.47 ms (v31, H100).
//   The two consumers' epilogues run one after the other (named barriers 4 and 5), so each chunk's slot and phase is
//   waited for by one warpgroup at a time, at most one phase ahead. Not kept (v33, H100): each consumer its own half
//   of the ring and producer thread, the epilogues at once (exact, 13% slower); p, m, v and p_work stored by the TMA
//   from the slot (exact, 2% slower). With grad_in (the step's earlier microbatches' gradient) g is that element plus
//   the accumulator (kGradIn). Each thread sums its g² over its tiles; the CTA's sum goes to partials[blockIdx.x]
//   (fixed order), which reduce_partials sums.
// Ragged edges: TMA zero-fills rows past K and columns past M or N (they add zeros); a 64-column operand box or an
// epilogue chunk wholly past M or N is not loaded; the epilogue skips elements past M or N.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <algorithm>
#include <stdexcept>

#include "adamw.cuh"
#include "dw_adamw/dw_adamw.h"
#include "reductions.cuh"
#include "device.h"
#include "sm90/barriers.cuh"
#include "sm90/tma.cuh"
#include "sm90/wgmma.cuh"

namespace trainer::kernels {
namespace {

using namespace trainer::sm90;

constexpr int kBM = 128, kBN = 128, kBK = 64;
constexpr int kSubBytes = kBK * 128;                          // one 64-row x 64-column bf16 sub-tile (128B rows)
constexpr int kABytes = 2 * kSubBytes, kBBytes = 2 * kSubBytes;  // M (N) = 128: two sub-tiles
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kThreads = 384;  // producer warpgroup + two consumers
// The epilogue's chunks: 16 rows x 128 columns (the tile's whole width), an 8 KB fp32 box per array (unswizzled: 512
// contiguous bytes a row); chunk k is rows 16k.. of the tile, which consumer warp k % 4 holds (of half k / 4). v33
// (H100, the bench's xl block): 1.409 against 1.450 ms for v28c's chunks of 64 rows x 32 columns (128 bytes a row),
// every weight 1.5-4% faster, the epilogue alone (K 64) 1.068 against 1.098.
constexpr int kEpiRows = 16, kEpiCols = 128, kEpiBox = kEpiRows * kEpiCols * 4, kEpiChunks = 8;
static_assert(kEpiBox == 8192 && kEpiChunks * kEpiRows * kEpiCols == kBM * kBN, "8 KB boxes; the chunks cover a tile");
/// Byte offset of element (r, c) of a chunk in a TMA-loaded box (p, m, v, grad_in).
__device__ __forceinline__ uint32_t box_offset(int r, int c) { return uint32_t(r * kEpiCols + c) * 4u; }
/// Arrays the epilogue reads (p, m, v with the update; grad_in).
template <bool kUpdate, bool kGradIn>
constexpr int kEpiArrays = (kUpdate ? 3 : 0) + (kGradIn ? 1 : 0);
/// Boxes a slot holds: the loaded arrays, and (without grad_in) the chunk's gradient written by the consumer; with
/// grad_in the epilogue writes the sum into grad_in's box in place.
template <bool kUpdate, bool kGradIn>
constexpr int kEpiSlotBoxes = kEpiArrays<kUpdate, kGradIn> + (!kGradIn && kEpiArrays<kUpdate, kGradIn> > 0);
// The most operand stages and epilogue slots. The ring takes its slots first, the operand stages what shared memory
// is left. Measured against other splits (v31, H100, xl block): 7 stages for the product alone 0.817 against 0.757
// ms at 4; 2 slots and 5 stages 1.475 against 1.468 with the update; the epilogue's float4 loop unrolled 2 or 4
// times 1.471 / 1.484 (not unrolled).
constexpr int kMaxStages = 4, kMaxEpiSlots = 4;
/// The ring's slots: 96 KB of boxes at most, kMaxEpiSlots slots at most (3 with the update, with or without grad_in).
template <bool kUpdate, bool kGradIn>
constexpr int kEpiSlots =
    kEpiArrays<kUpdate, kGradIn> == 0 ? 0 : std::min(kMaxEpiSlots, 12 / kEpiSlotBoxes<kUpdate, kGradIn>);
template <bool kUpdate, bool kGradIn>
constexpr int kEpiSlotBytes = kEpiSlotBoxes<kUpdate, kGradIn> * kEpiBox;
template <bool kUpdate, bool kGradIn>
constexpr int kEpiRingBytes = kEpiSlots<kUpdate, kGradIn> * kEpiSlotBytes<kUpdate, kGradIn>;
// Shared memory besides stages and ring: the 1024-byte alignment, the 8 consumer warps' sums of g², 8 + 8 operand
// mbarriers at most, 4 + 4 of the ring
constexpr int kSmemLimit = 227 * 1024, kSmemFixed = 1024 + 8 * 8 + (2 * 8 + 8) * 8;
/// Operand stages: kMaxStages, or fewer where the ring leaves less room (with the update's 96 KB ring: 4).
template <bool kUpdate, bool kGradIn>
constexpr int kStagesOf =
    std::min(kMaxStages, (kSmemLimit - kSmemFixed - kEpiRingBytes<kUpdate, kGradIn>) / kStageBytes);
template <bool kUpdate, bool kGradIn>
constexpr int kSmemBytes = kStagesOf<kUpdate, kGradIn> * kStageBytes + kEpiRingBytes<kUpdate, kGradIn> + kSmemFixed;
// setmaxnreg: the producers give registers up, the consumers (128 accumulators a thread) take them
constexpr int kRegsProducer = 40, kRegsConsumer = 232;
static_assert(kSmemBytes<true, true> <= kSmemLimit && kSmemBytes<true, false> <= kSmemLimit &&
                  kSmemBytes<false, true> <= kSmemLimit && kSmemBytes<false, false> <= kSmemLimit,
              "shared memory of one sm_90 CTA");
static_assert(kStagesOf<true, true> >= 2 && kStagesOf<true, false> >= 2 && kStagesOf<false, true> >= 2 &&
                  kStagesOf<false, false> <= 8 && kMaxEpiSlots >= 1 && kMaxEpiSlots <= 4,
              "2..8 operand stages (their mbarriers), 1..4 epilogue slots");
static_assert(kRegsProducer + 2 * kRegsConsumer <= 3 * ((65536 / kThreads) & ~7), "setmaxnreg budget");

struct Params {
  int M, N, K;
  float* p;
  float* m;
  float* v;
  bf16* p_work;
  float* grad;
  const float* grad_in;  // with kGradIn: added to the product
  double* partials;
  int64_t ld;
  bool m_fastest;   // tile order: consecutive tiles share an N (X) panel and walk the M (dY) panels; else the reverse
  AdamWStep a;
};

/// Waits for the phase of parity `parity` of the mbarrier `bar` (mbar_wait). Built with DWA_HANG_CHECK (the bench's
/// debug library), a wait that polls 2^22 times (seconds) prints the block, thread, barrier and parity and traps, so
/// that a protocol error ends in a message instead of a hang.
__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t parity, const char* what) {
#ifdef DWA_HANG_CHECK
  for (long long n = 0;; ++n) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
    if (done) return;
    if (n == (1ll << 22)) {
      printf("dw_adamw: block %d thread %d stuck on %s, parity %u\n", int(blockIdx.x), int(threadIdx.x), what, parity);
      __trap();
    }
  }
#else
  (void)what;
  mbar_wait(bar, parity);
#endif
}

/// The epilogue operands' tensor maps (p, m, v, grad_in: fp32 [M, N], row stride ld; boxes of 16 x 128, unswizzled).
struct EpiMaps {
  CUtensorMap p, m, v, grad_in;
};

/// The epilogue of the product alone (no update, no grad_in: no ring): one consumer thread stores the gradient of
/// its tile (rows m0.., columns n0..). acc[h][4j + e]: row m0 + 64h + 16 warp + g + 8 (e / 2), column n0 + 8j + 2t +
/// e % 2. The chunks (64 rows x 32 columns, k = 4h + q) are a loop, not unrolled: a chunk's 16
/// accumulators are always acc[0][0..15]; after each chunk the rest move down by 16 (static register indices).
__device__ __forceinline__ void epilogue_store(const Params& p, float (&acc)[2][64], int m0, int n0, int warp, int g,
                                               int t, double& sumsq) {
#pragma unroll 1
  for (int k = 0; k < kEpiChunks; ++k) {
    const int h = k / 4, q = k % 4;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int rl = 16 * warp + g + 8 * r, cl = 8 * jj + 2 * t;  // in the chunk
        const int row = m0 + 64 * h + rl, col = n0 + 32 * q + cl;
        if (row >= p.M || col >= p.N) continue;  // N even: col + 1 < N too
        const float g0 = acc[0][4 * jj + 2 * r], g1 = acc[0][4 * jj + 2 * r + 1];
        sumsq += double(g0) * double(g0) + double(g1) * double(g1);
        if (p.grad) *reinterpret_cast<float2*>(p.grad + int64_t(row) * p.ld + col) = make_float2(g0, g1);
      }
    // the next chunk's accumulators to the front
#pragma unroll
    for (int i = 0; i < 128 - 16; ++i) acc[i / 64][i % 64] = acc[(i + 16) / 64][(i + 16) % 64];
  }
}

/// Byte offset of element (r, c) of a chunk in the slot's g box (consumers only, so its own layout): 512-byte rows
/// whose 16-byte groups are permuted by (r % 8) * 2, so that the owner warp's float2 writes (8 rows x 4 column pairs
/// a store) fill the 32 banks twice and a warp's float4 reads of one row are whole.
__device__ __forceinline__ uint32_t gbox_offset(int r, int c) {
  return uint32_t(r) * 512u + ((uint32_t(c >> 2) ^ (uint32_t(r & 7) << 1)) << 4) + uint32_t(c & 3) * 4u;
}

/// The operand producer (one thread): the CTA's tiles in order, each K block's A (dY, two 64-column sub-tiles) and B
/// (X, two) into stage it % kStages once `empty` says the stage is free, completing on `full` by transaction bytes.
/// A second sub-tile wholly past M (N) is not loaded: its stale rows reach only output rows (columns) past M (N),
/// which the epilogues skip. tile_origin(j, m0, n0): the CTA's j-th tile.
template <int kStages, class TileOrigin>
__device__ __forceinline__ void produce_operands(const Params& p, const CUtensorMap& tma_dy, const CUtensorMap& tma_x,
                                                 uint8_t* sbase, uint64_t* full, uint64_t* empty, int my_tiles, int nk,
                                                 const TileOrigin& tile_origin) {
  for (int j = 0; j < my_tiles; ++j) {
    int m0, n0;
    tile_origin(j, m0, n0);
    for (int kb = 0; kb < nk; ++kb) {
      const int it = j * nk + kb, s = it % kStages;
      wait_phase(empty + s, uint32_t(((it / kStages) & 1) ^ 1), "empty (producer)");
      const bool a2 = m0 + 64 < p.M, b2 = n0 + 64 < p.N;
      uint8_t* sa = sbase + s * kStageBytes;
      uint8_t* sb = sa + kABytes;
      mbar_arrive_expect_tx(full + s, uint32_t(kSubBytes * (2 + a2 + b2)));
      tma_load_4d(sa, &tma_dy, m0, kb * kBK, 0, 0, full + s);
      if (a2) tma_load_4d(sa + kSubBytes, &tma_dy, m0 + 64, kb * kBK, 0, 0, full + s);
      tma_load_4d(sb, &tma_x, n0, kb * kBK, 0, 0, full + s);
      if (b2) tma_load_4d(sb + kSubBytes, &tma_x, n0 + 64, kb * kBK, 0, 0, full + s);
    }
  }
}

/// The epilogue operands' producer (one thread): per chunk of the CTA's tiles in order, p, m, v (kUpdate) and
/// grad_in (kGradIn) boxes into ring slot c % kSlots (slots kSlotBytes apart; p, m, v at boxes 0, 1, 2, grad_in after
/// them) once `epi_empty` says the slot is free. A chunk wholly past M or N is not loaded (its phase completes on
/// the arrival alone): the epilogue skips its elements.
template <bool kUpdate, bool kGradIn, int kSlots, int kSlotBytes, class TileOrigin>
__device__ __forceinline__ void produce_epilogue_operands(const Params& p, const EpiMaps& epi, uint8_t* ring,
                                                          uint64_t* epi_full, uint64_t* epi_empty, int my_tiles,
                                                          const TileOrigin& tile_origin) {
  constexpr int kArrays = kEpiArrays<kUpdate, kGradIn>;
  for (int j = 0; j < my_tiles; ++j) {
    int m0, n0;
    tile_origin(j, m0, n0);
    for (int hq = 0; hq < kEpiChunks; ++hq) {
      const int c = j * kEpiChunks + hq, s = c % kSlots;
      const int row0 = m0 + kEpiRows * hq, col0 = n0;
      wait_phase(epi_empty + s, uint32_t(((c / kSlots) & 1) ^ 1), "epilogue empty (producer)");
      const bool in = row0 < p.M && col0 < p.N;
      mbar_arrive_expect_tx(epi_full + s, in ? uint32_t(kArrays * kEpiBox) : 0u);
      if (!in) continue;
      uint8_t* slot = ring + s * kSlotBytes;
      if constexpr (kUpdate) {
        tma_load_2d(slot, &epi.p, col0, row0, epi_full + s);
        tma_load_2d(slot + kEpiBox, &epi.m, col0, row0, epi_full + s);
        tma_load_2d(slot + 2 * kEpiBox, &epi.v, col0, row0, epi_full + s);
      }
      if constexpr (kGradIn)
        tma_load_2d(slot + (kUpdate ? 3 : 0) * kEpiBox, &epi.grad_in, col0, row0, epi_full + s);
    }
  }
}

/// AdamW on four consecutive elements (flat offset o into p, m, v, p_work): p, m, v from the slot's boxes at byte
/// offset so (box_offset), g = gv; the results stored whole (16-byte p, m, v; 8-byte p_work when given).
__device__ __forceinline__ void update_float4(const Params& p, const AdamWStep& a, const uint8_t* slot, uint32_t so,
                                              const float4& gv, int64_t o) {
  float4 pv = *reinterpret_cast<const float4*>(slot + so);
  float4 mv = *reinterpret_cast<const float4*>(slot + kEpiBox + so);
  float4 vv = *reinterpret_cast<const float4*>(slot + 2 * kEpiBox + so);
  const float w0 = adamw_one(pv.x, gv.x, mv.x, vv.x, a), w1 = adamw_one(pv.y, gv.y, mv.y, vv.y, a);
  const float w2 = adamw_one(pv.z, gv.z, mv.z, vv.z, a), w3 = adamw_one(pv.w, gv.w, mv.w, vv.w, a);
  *reinterpret_cast<float4*>(p.p + o) = pv;
  *reinterpret_cast<float4*>(p.m + o) = mv;
  *reinterpret_cast<float4*>(p.v + o) = vv;
  if (p.p_work) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(w0, w1), hi = __floats2bfloat162_rn(w2, w3);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&lo), u.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(p.p_work + o) = u;
  }
}

/// The epilogue with a ring (the update, grad_in or both): per chunk (16 rows x 128 columns of the tile), the warp
/// that holds its rows writes its 64 accumulators of them into the slot's g box (gbox_offset's layout; with grad_in,
/// their sums with grad_in's elements into grad_in's box in place, in the TMA's layout), the warpgroup syncs (named
/// barrier 6 + wc), and then each thread takes 4 of the chunk's 512 float4s in a runtime loop: a row's 32 float4s
/// are one warp, so the global stores are whole 512-byte rows and the shared reads are free of bank conflicts, and
/// the loop body holds one float4's AdamW (v28b's unrolled 16-element body was ~40 KB of SASS).
template <bool kUpdate, bool kGradIn>
__device__ __forceinline__ void epilogue_staged(const Params& p, const AdamWStep& a, float (&acc)[2][64], int m0,
                                                int n0, int j, uint8_t* ring, uint64_t* epi_full,
                                                uint64_t* epi_empty, int wc, int ct, int warp, int g, int t,
                                                double& sumsq) {
  constexpr int kArrays = kEpiArrays<kUpdate, kGradIn>, kSlots = kEpiSlots<kUpdate, kGradIn>;
  // the g box: its own (gbox_offset's layout), or with grad_in, grad_in's box (the TMA's layout), summed in place
  constexpr int kGBox = kGradIn ? (kUpdate ? 3 : 0) : kArrays;
  auto goff = [](int r, int c) { return kGradIn ? box_offset(r, c) : gbox_offset(r, c); };
  // chunk k = 4 h + w: warp w's rows of half h, acc[h] (static under the unrolled h)
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll 1
    for (int w = 0; w < 4; ++w) {
      const int k = 4 * h + w;
      const int c = j * kEpiChunks + k;  // the chunk's place in the ring's sequence
      uint8_t* slot = ring + (c % kSlots) * kEpiSlotBytes<kUpdate, kGradIn>;
      wait_phase(epi_full + c % kSlots, uint32_t((c / kSlots) & 1), "epilogue full");
      if (warp == w) {
        // acc[h][4 jj + 2 r + e]: chunk row g + 8 r, column 8 jj + 2 t + e
#pragma unroll
        for (int jj = 0; jj < 16; ++jj)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float2* gp = reinterpret_cast<float2*>(slot + kGBox * kEpiBox + goff(g + 8 * r, 8 * jj + 2 * t));
            float2 gv = make_float2(acc[h][4 * jj + 2 * r], acc[h][4 * jj + 2 * r + 1]);
            if constexpr (kGradIn) {  // the earlier microbatches' sum, then this product (this thread's own elements)
              const float2 gi = *gp;
              gv.x = gi.x + gv.x, gv.y = gi.y + gv.y;
            }
            *gp = gv;
          }
      }
      named_bar_sync(6 + wc, 128);  // the chunk's g box is whole
#pragma unroll 1
      for (int i = 0; i < kEpiRows * kEpiCols / 4 / 128; ++i) {
        const int e4 = ct + 128 * i, rl = e4 / (kEpiCols / 4), cl = (e4 % (kEpiCols / 4)) * 4;  // in the chunk
        const int row = m0 + kEpiRows * k + rl, col = n0 + cl;
        if (row >= p.M || col >= p.N) continue;  // N a multiple of 4: col + 3 < N too
        const uint32_t so = box_offset(rl, cl);
        const float4 gv = *reinterpret_cast<const float4*>(slot + kGBox * kEpiBox + goff(rl, cl));
        sumsq += double(gv.x) * double(gv.x) + double(gv.y) * double(gv.y) + double(gv.z) * double(gv.z) +
                 double(gv.w) * double(gv.w);
        const int64_t o = int64_t(row) * p.ld + col;
        if (p.grad) *reinterpret_cast<float4*>(p.grad + o) = gv;
        if constexpr (kUpdate) update_float4(p, a, slot, so, gv, o);
      }
      // With grad_in this thread wrote into a box the TMA writes next: its shared stores ordered before that write
      // (generic proxy, then async proxy). Then: this thread has read the slot.
      if constexpr (kGradIn) fence_proxy_async();
      mbar_arrive(epi_empty + c % kSlots);
    }
}

template <bool kUpdate, bool kGradIn>
__global__ void __launch_bounds__(kThreads, 1)
    dw_adamw_kernel(const Params p, const __grid_constant__ CUtensorMap tma_dy,
                    const __grid_constant__ CUtensorMap tma_x, const __grid_constant__ EpiMaps epi) {
  constexpr int kArrays = kEpiArrays<kUpdate, kGradIn>, kSlots = kEpiSlots<kUpdate, kGradIn>;
  constexpr int kStages = kStagesOf<kUpdate, kGradIn>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sbase = align_smem_1024(smem_raw);
  uint8_t* ring = sbase + kStages * kStageBytes;  // 1024-byte aligned: slots of 8 KB boxes
  uint64_t* full = reinterpret_cast<uint64_t*>(ring + kEpiRingBytes<kUpdate, kGradIn>);
  uint64_t* empty = full + kStages;
  uint64_t* epi_full = empty + kStages;  // [4]: kSlots used
  uint64_t* epi_empty = epi_full + 4;    // [4]
  static_assert(kSlots <= 4, "the ring's mbarriers: 4 of each");
  double* warp_sumsq = reinterpret_cast<double*>(epi_empty + 4);  // [8]: consumer warp 4 wc + w

  const int tid = threadIdx.x, wg = tid / 128;
  const int TM = (p.M + kBM - 1) / kBM, TN = (p.N + kBN - 1) / kBN, tiles = TM * TN, nk = (p.K + kBK - 1) / kBK;
  const int unit = int(blockIdx.x), units = int(gridDim.x);
  // this CTA's j-th tile, tile unit + j units: its first row and column
  auto tile_origin = [&](int j, int& m0, int& n0) {
    const int L = unit + j * units;
    m0 = (p.m_fastest ? L % TM : L / TN) * kBM;
    n0 = (p.m_fastest ? L / TM : L % TN) * kBN;
  };
  const int my_tiles = (tiles - unit + units - 1) / units;  // unit < tiles (launcher)
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 128);
    }
    for (int s = 0; s < kSlots; ++s) {
      mbar_init(epi_full + s, 1);
      mbar_init(epi_empty + s, 128);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producers: operands (thread 0), epilogue operands (thread 32) ----
    setmaxnreg_dec<kRegsProducer>();
    if (tid == 0) {
      produce_operands<kStages>(p, tma_dy, tma_x, sbase, full, empty, my_tiles, nk, tile_origin);
    } else if (tid == 32) {
      if constexpr (kArrays > 0)
        produce_epilogue_operands<kUpdate, kGradIn, kSlots, kEpiSlotBytes<kUpdate, kGradIn>>(
            p, epi, ring, epi_full, epi_empty, my_tiles, tile_origin);
    }
    return;
  }

  // ---- consumers: warpgroup wc takes the CTA's tiles wc, wc + 2, ... ----
  setmaxnreg_inc<kRegsConsumer>();
  const int wc = wg - 1, ct = tid % 128, warp = ct / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  AdamWStep a = p.a;
  if constexpr (kUpdate) load_per_step(a);
  const uint32_t s0 = smem_addr(sbase);
  double sumsq = 0.0;  // of this thread's gradient elements, over its tiles
  for (int j = wc; j < my_tiles; j += 2) {
    int m0, n0;
    tile_origin(j, m0, n0);
    float acc[2][64];
    if (j > 0) named_bar_sync(1 + wc, 256);  // the other consumer has waited for every stage of its tile
    for (int kb = 0; kb < nk; ++kb) {
      const int it = j * nk + kb, s = it % kStages;
      wait_phase(full + s, uint32_t((it / kStages) & 1), wc ? "full (consumer 1)" : "full (consumer 0)");
      if (kb == nk - 1 && j + 1 < my_tiles) named_bar_arrive(1 + (1 - wc), 256);  // the next tile may start
      const uint32_t sa = s0 + uint32_t(s * kStageBytes), sb = sa + kABytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t db = make_desc(sb + kk * 2048, kSubBytes, 1024);  // N-major B: sub-tiles kSubBytes apart
#pragma unroll
        for (int h = 0; h < 2; ++h)
          wgmma_ss_n128<1, 1>(acc[h], make_desc(sa + h * kSubBytes + kk * 2048, kSubBytes, 1024), db,
                              kb > 0 || kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous block's products are done: its stage is free
      if (kb > 0) mbar_arrive(empty + (it - 1) % kStages);
    }
    wgmma_wait<0>();
    fence_regs(acc[0]);
    fence_regs(acc[1]);
    mbar_arrive(empty + (j * nk + nk - 1) % kStages);

    if (kArrays > 0 && j > 0) named_bar_sync(4 + wc, 256);  // the other's epilogue (tile j - 1) is done
    if constexpr (kArrays > 0) {
      epilogue_staged<kUpdate, kGradIn>(p, a, acc, m0, n0, j, ring, epi_full, epi_empty, wc, ct, warp, g, t, sumsq);
    } else {
      epilogue_store(p, acc, m0, n0, warp, g, t, sumsq);
    }
    if (kArrays > 0 && j + 1 < my_tiles) named_bar_arrive(4 + (1 - wc), 256);  // tile j + 1's may start
  }
  if (p.partials) {  // the CTA's sum, in a fixed order: lanes (tree), then warps 0..7
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sumsq += __shfl_xor_sync(0xffffffffu, sumsq, o);
    if (lane == 0) warp_sumsq[4 * wc + warp] = sumsq;
    named_bar_sync(3, 256);  // both consumers (one without tiles still arrives here)
    if (ct == 0 && wc == 0) {
      double s = 0.0;
      for (int w = 0; w < 8; ++w) s += warp_sumsq[w];
      p.partials[blockIdx.x] = s;
    }
  }
}


/// Launches the kernel over `tiles` tiles with at most one CTA per SM; returns the grid (CTAs).
template <bool kUpdate, bool kGradIn>
unsigned launch(int64_t tiles, const Params& p, const CUtensorMap& tdy, const CUtensorMap& tx, const EpiMaps& epi,
                cudaStream_t s) {
  // the attribute belongs to the function on one device: once per instantiation and device
  static bool smem_set[64] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev >= 64 || !smem_set[dev]) {
    set_smem(dw_adamw_kernel<kUpdate, kGradIn>, kSmemBytes<kUpdate, kGradIn>);
    if (dev < 64) smem_set[dev] = true;
  }
  const unsigned grid = unsigned(std::min<int64_t>(tiles, device_sm_count()));
  dw_adamw_kernel<kUpdate, kGradIn><<<grid, kThreads, kSmemBytes<kUpdate, kGradIn>, s>>>(p, tdy, tx, epi);
  return grid;
}

}  // namespace

bool dw_adamw_supported(const DwAdamWArgs& a, const char** why) {
  auto no = [&](const char* r) {
    if (why) *why = r;
    return false;
  };
  auto aligned = [](const void* q, uintptr_t n) { return reinterpret_cast<uintptr_t>(q) % n == 0; };
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return no("no CUDA device");
  static int cached_dev = -1, cached_cc = 0;  // the compute capability of the last device asked about (re-read on
                                              // a change of device)
  if (dev != cached_dev) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev))
      return no("no CUDA device");
    cached_dev = dev, cached_cc = 10 * major + minor;
  }
  if (cached_cc != 90) return no("not an sm_90 GPU");
  if (a.M < 1 || a.N < 1 || a.K < 1) return no("an empty product");
  if (!a.dy || !a.x) return no("dy or x is null");
  if (a.update && (!a.p || !a.m || !a.v)) return no("p, m or v is null");
  if (!a.update && !a.grad) return no("neither an update nor a gradient output");
  if (a.N % 4 || a.ld % 4 || a.ld < a.N) return no("N and ld must be multiples of 4, ld >= N");
  if (a.ld_dy < a.M || a.ld_x < a.N || a.ld_dy % 8 || a.ld_x % 8) return no("ld_dy / ld_x: >= M / N, multiples of 8");
  if (!aligned(a.dy, 16) || !aligned(a.x, 16)) return no("dy and x must be 16-byte aligned");
  for (const void* q : {static_cast<const void*>(a.p), static_cast<const void*>(a.m), static_cast<const void*>(a.v),
                        static_cast<const void*>(a.grad), static_cast<const void*>(a.grad_in)})
    if (!aligned(q, 16)) return no("p, m, v, grad and grad_in must be 16-byte aligned");
  if (!aligned(a.p_work, 8)) return no("p_work must be 8-byte aligned");
  if (a.sumsq_out && !a.partials) return no("sumsq_out needs partials");
  if (int64_t(a.K) * std::max(a.ld_dy, a.ld_x) * 2 >= (int64_t(1) << 40) ||
      int64_t(a.M) * a.ld * 4 >= (int64_t(1) << 40))
    return no("K x ld_dy / ld_x or M x ld beyond the TMA's 2^40 bytes");
  return true;
}

void dw_adamw(const DwAdamWArgs& a, cudaStream_t s) {
  const char* why = nullptr;
  if (!dw_adamw_supported(a, &why)) throw std::invalid_argument(std::string("dw_adamw: ") + why);
  // The tiles in flight (about two per SM, consecutive) share panels of one operand and walk the other's: the walked
  // operand is read whole again for each panel of the shared one unless it stays in L2, so walk the smaller one (W2's
  // X = g is 4 x its dY at xl: 42 MB against 10.5).
  const bool m_fastest = int64_t(a.M) < int64_t(a.N);
  Params p{a.M, a.N, a.K, a.p, a.m, a.v, a.p_work, a.grad, a.grad_in, a.sumsq_out ? a.partials : nullptr, a.ld,
           m_fastest, a.a};
  // dY and X as [K rows, M (N) columns] bf16 matrices: the 4-D [B, T, H, d] maps with B = H = 1, boxes of 64 rows.
  const CUtensorMap tdy = encode_tma_bf16(a.dy, 1, a.K, 1, a.M, int64_t(a.K) * a.ld_dy, a.ld_dy,
                                          int64_t(a.K) * a.ld_dy, kBK);
  const CUtensorMap tx =
      encode_tma_bf16(a.x, 1, a.K, 1, a.N, int64_t(a.K) * a.ld_x, a.ld_x, int64_t(a.K) * a.ld_x, kBK);
  // the epilogue's operands (maps of the arrays it reads; the others stay zero)
  EpiMaps epi{};
  auto encode = [&](const float* q) { return encode_tma_f32_2d(q, a.M, a.N, a.ld, kEpiRows, kEpiCols); };
  if (a.update) {
    epi.p = encode(a.p);
    epi.m = encode(a.m);
    epi.v = encode(a.v);
  }
  if (a.grad_in) epi.grad_in = encode(a.grad_in);
  const int64_t tiles = int64_t(ceil_div(a.M, kBM)) * ceil_div(a.N, kBN);
  if (tiles > int64_t(INT32_MAX) / 4) throw std::invalid_argument("dw_adamw: too many tiles");
  if (a.sumsq_out && std::min<int64_t>(tiles, device_sm_count()) > kReduceMaxBlocks)
    throw std::invalid_argument("dw_adamw: more CTAs than reduce_partials sums");
  unsigned grid;
  if (a.update && a.grad_in) grid = launch<true, true>(tiles, p, tdy, tx, epi, s);
  else if (a.update) grid = launch<true, false>(tiles, p, tdy, tx, epi, s);
  else if (a.grad_in) grid = launch<false, true>(tiles, p, tdy, tx, epi, s);
  else grid = launch<false, false>(tiles, p, tdy, tx, epi, s);
  CUDA_CHECK(cudaGetLastError());
  if (a.sumsq_out) reduce_partials(a.sumsq_out, a.partials, int(grid), s);
}

}  // namespace trainer::kernels
