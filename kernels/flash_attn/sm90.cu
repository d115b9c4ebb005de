// The Hopper (sm_90a, wgmma) FlashAttention kernels in production (fwd_sm90.cuh, bwd_sm90.cuh, launch_sm90.cuh): bf16,
// d_head 64, 80, 96 and 128, the tile configuration per head dimension chosen by measurement on an H200 (NOTES.md,
// 2026-12-01 evening), and whether the device runs them.
// Compiled for sm_90a only (CMake object library trainer_sm90; trainer_lib then defines TRAINER_SM90,
// which turns on the dispatch in launch.cuh): fwd_launch / bwd_launch call these when uses_sm90_fwd / uses_sm90_bwd.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <atomic>

#include "flash_attn/launch_sm90.cuh"

namespace trainer::flash {
namespace {

/// Forward: three consumer warpgroups (192 query rows, 160 registers each) at d 64, two (128 rows, 240 registers) at d
/// 128, 128 keys per tile, two K / V stages (16 x 64, T 16384, causal: 1.15 ms; two consumers at d 64: 1.43);
/// FlashAttention-3's intra-warpgroup overlap at d 64 (with ping-pong) and d 128 (ping-pong added nothing there until
/// the forward was persistent, below), not at d 80 (slower with two consumers; three spill with it). Side by side with
/// the loop before it (results/h200/2026-12-02/v14/call5; 16 heads, T 16384, causal): d 128 1.90 -> 1.81 ms, d 64 1.12
/// -> 1.10; the same bits of O and L. Every forward is persistent (one CTA per SM taking query tiles from a counter,
/// FwdTileCounter; the next tile's loads under the last one's P V and O stores): rounds beside the one-CTA-a-tile
/// kernel, same bits (results/h200/2026-12-03/v22/call1): 16 heads, T 16384, causal: d 64 1.159 -> 1.129 ms, d 128
/// 1.910 -> 1.884, d 80 1.341 -> 1.353 (noise: two runs of one kernel differed by 2% there); xl's 4 x 32 x 80, T 2048:
/// 0.279 -> 0.266, T 512 0.054 -> 0.053; small's 4 x 12 x 64, T 4096: 0.290 -> 0.279, T 512 0.038 -> 0.036. d 128
/// persistent takes the ping-pong too (one CTA a tile it had added nothing): 1-2% at four shapes in 21 rounds, 16 heads
/// T 16384 1.880 -> 1.848 ms, 4 x 32 heads T 2048 0.302 -> 0.301 (results/h200/2026-12-03/v22/call5). d 64 and
/// 128 leave O's rescale out where a warp's running maxima did not move (kSkipUnitRescale: a multiply by exactly 1,
/// the same bits): 31 rounds on an H100, 16 heads T 16384 causal, d 64 1.126 -> 1.115 ms, d 128 1.835 -> 1.820; at
/// d 80 (the loop without the overlap, where the rescale is not under a product) it lost 0.6-1.4%, so d 80 and 96
/// (the same loop; not timed) keep the rescale (results/h100/2026-12-06/v39/call2).
/// Backward: 128 keys (2 consumer warpgroups) x 64 queries, two query stages; the consumers' register budget 232
/// (no spill), 240 at d 128 (48-64 bytes of spill, against more with 232); its query loop split over CTAs when the
/// key tiles leave SMs idle and the split at least halves the time (cuda_sizes::flash_dkdv_chunk). d 64: 128
/// queries a tile (each consumer's dQ rows over all columns, one dQ stage for shared memory, 240 registers, no
/// spill): half the per-tile hand-offs and wider products, 16 heads, T 16384, causal 3.01-3.17 ms against 3.43-3.55
/// (the 64-query tile, sm90_capi variant 0; same process, results/h200/2026-12-03/v20); T 512 / 2048 the same.
/// d 80 (the xl preset's): two sub-tiles per row as d 128, products over its 80 columns; the d 64 forward's three
/// consumers (4 x 32 heads, T 16384, causal: 11.6 ms against 13.6 with two; until the K / V barriers were split in
/// the fourteenth session ptxas serialized the non-causal build's wgmma at 160 registers, C7512, and both spilled a
/// few bytes; now neither) and the d 64 backward's budget (no spill).
template <int kD>
struct Sm90Config;
template <>
struct Sm90Config<64> {
  using Fwd = sm90::FwdTraits<64, 128, 3, 2, 24, 160, true, true, true, true>;
  using Bwd = sm90::BwdTraits<64, 2, 24, 240, 128, 1>;
};
template <>
struct Sm90Config<80> {
  using Fwd = sm90::FwdTraits<80, 128, 3, 2, 24, 160, false, false, true>;
  using Bwd = sm90::BwdTraits<80, 2, 40, 232>;
};
/// d 96: two sub-tiles per row as d 80, and d 80's configuration: three consumers without the overlap (side by side
/// in interleaved rounds, results/h200/2026-12-02/v15/call2: 16 x 96, T 16384, causal 1.48 ms against 1.62 with d
/// 128's two consumers and the overlap; 4 x 32 heads, T 2048 / 16384: 0.288 / 12.67 against 0.306 / 13.81; T 512
/// 0.056 against 0.054), the backward at d 64's budget (no spill; 240 registers spill 4 bytes, the same time).
template <>
struct Sm90Config<96> {
  using Fwd = sm90::FwdTraits<96, 128, 3, 2, 24, 160, false, false, true>;
  using Bwd = sm90::BwdTraits<96, 2, 40, 232>;
};
template <>
struct Sm90Config<128> {
  using Fwd = sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, true, true, true>;
  using Bwd = sm90::BwdTraits<128, 2, 24, 240>;
};

}  // namespace

bool sm90_flash_available() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> state[kMaxDevices] = {};  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int st = dev < kMaxDevices ? state[dev].load(std::memory_order_relaxed) : 0;
  if (st == 0) {
    int major = 0, minor = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    st = major == 9 && minor == 0 ? 1 : 2;  // sm_90a code runs on compute capability 9.0 only
    if (dev < kMaxDevices) state[dev].store(st, std::memory_order_relaxed);
  }
  return st == 1;
}

template <int kD, bool kCausal>
void fwd_sm90_launch(const FlashParams& p, cudaStream_t s) {
  using Tr = typename Sm90Config<kD>::Fwd;
  static_assert(Tr::kBM == sm90_fwd_rows(kD), "launch.h's tile constants (the dispatch rule) are these");
  sm90::launch_fwd<Tr, kCausal>(p, s);
}

template <int kD, bool kCausal>
void bwd_sm90_launch(const FlashBwdParams& p, cudaStream_t s) {
  using Tr = typename Sm90Config<kD>::Bwd;
  static_assert(Tr::kBN == kSm90BwdKeyTile && Tr::kBM == sm90_bwd_query_rows(kD),
                "launch.h's tile constants (the workspace rule) are these");
  sm90::launch_bwd<Tr, kCausal>(p, s);
}

template void fwd_sm90_launch<64, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<64, true>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<80, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<80, true>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<96, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<96, true>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<128, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<128, true>(const FlashParams&, cudaStream_t);
template void bwd_sm90_launch<64, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<64, true>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<80, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<80, true>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<96, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<96, true>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<128, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<128, true>(const FlashBwdParams&, cudaStream_t);

}  // namespace trainer::flash
