// Declarations of the per-(d_head, causal, dtype) launchers; their definitions are in launch.cuh, explicitly
// instantiated in fwd_d*.cu / bwd_d*.cu; the shared passes (preprocess, convert, combine, split rules) are in
// passes.cu. Host code includes this header only.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda_sizes.h"
#include "device.h"  // device_sm_count
#include "flash_attn/params.h"

namespace trainer::flash {

/// Forward / backward for one head dimension (16, 32, 64, 80, 96, 128), mask and dtype (kF32: fp32 inputs, 3xTF32
/// tensor-core kernels; else bf16).
template <int kD, bool kCausal, bool kF32>
void fwd_launch(const FlashParams& p, cudaStream_t s);
template <int kD, bool kCausal, bool kF32>
void bwd_launch(const FlashBwdParams& p, cudaStream_t s);

/// (batch, head) pairs whose tiles interleave in the tile kernels' CTA order (FlashParams::tile_group, tile_coord in
/// params.h) unless the caller chose: measured on one H200 (kernels/flash_attn/NOTES.md, "CTA order").
constexpr int kTileGroup = 16;
/// The tile kernels' grid for `tiles` CTAs per (batch, head) pair, in the CTA order of tile_coord (params.h):
/// (G, tiles, ceil(batch x heads / G)) with G = p.tile_group (set by the launcher, tile_group()) capped at the pairs.
inline dim3 tile_grid(const FlashParams& p, int64_t tiles) {
  const int64_t pairs = int64_t(p.batch) * p.num_heads, G = p.tile_group < pairs ? p.tile_group : pairs;
  return dim3(unsigned(G), unsigned(tiles), unsigned((pairs + G - 1) / G));
}
/// p.tile_group, or kTileGroup when unset.
inline int tile_group(const FlashParams& p) { return p.tile_group > 0 ? p.tile_group : kTileGroup; }

/// Backward preprocessing (any dtype): D = rowsum(dO o O) into p.dsum; when zero_accum, dq_accum = 0 (where
/// p.dq_tile_state is given: its words = 0 instead, dq_accum left as it is), and dkv_accum = 0 too when the dK/dV
/// pass splits its query loop (p.dkdv_chunk > 0, set before this call).
void launch_bwd_preprocess(const FlashBwdParams& p, bool zero_accum, cudaStream_t s);
/// dQ = scale * dq_accum into the dq view (bf16 atomic mode) and, with_dkv (split dK/dV pass), dK, dV from
/// dkv_accum into theirs.
void launch_bwd_convert(const FlashBwdParams& p, bool with_dkv, cudaStream_t s);
/// dkdv_chunk for the dK/dV configuration bwd_launch<kD, *, kF32> picks in atomic mode (instantiated per kD and
/// dtype): > 0 when that pass splits its query loop and needs p.dkv_accum.
template <int kD, bool kF32>
int bwd_dkdv_chunk(int seq_len, int64_t bh, bool causal);
/// Key chunks of the forward for T keys in tiles of kbn, query tiles of kbm rows, bh = batch x heads: 1 unless the
/// query tiles give fewer than two CTAs per SM and there are at least 8 key tiles; then up to kMaxFwdSplits (16)
/// chunks of at least 4 key tiles each, so that about four CTAs per SM run.
int fwd_split_count(int seq_len, int kbm, int kbn, int64_t bh);
/// fwd_split_count for the tile configuration fwd_launch<kD, *, kF32> picks for this problem (instantiated per kD
/// and dtype).
template <int kD, bool kF32>
int fwd_splits(int seq_len, int64_t bh);
/// Merges the split forward's partial results (p.fwd_splits, p.o_accum, p.lse_accum) into p.o and p.lse.
void launch_fwd_combine(const FlashParams& p, cudaStream_t s);
/// Query tiles per CTA of the dK/dV pass for seq_len keys in tiles of kbn and queries in tiles of kbm, times `bh`
/// (batch x heads), on this device, for the mma.sync kernels (two CTAs per SM, any gain pays for the split) or the
/// Hopper kernel (one CTA per SM, the split must halve the time): 0 (no split) or the chunk, by the rule of
/// cuda_sizes::flash_dkdv_chunk (backend/cuda_sizes.h).
int dkdv_chunk(int seq_len, int kbn, int kbm, int64_t bh, bool causal, bool hopper);

/// Hopper kernels (sm90.cu, built only for sm_90a: TRAINER_SM90): bf16, d_head 64, 80, 96 and 128, tiles of
/// sm90_fwd_rows(d_head) query rows (forward) and kSm90BwdKeyTile keys x sm90_bwd_query_rows(d_head) queries (backward).
/// sm90_flash_available(): this device runs them (compute capability 9.0). The backward includes its preprocess and
/// convert passes (workspace in both modes: dsum, dq_accum, dq_tile_state; dkv_accum when it splits its query loop,
/// atomic mode only: dkdv_chunk with these tiles > 0).
constexpr int kSm90BwdKeyTile = cuda_sizes::kFlashSm90BwdKeyTile;
constexpr int sm90_bwd_query_rows(int d_head) { return cuda_sizes::flash_sm90_bwd_query_rows(d_head); }
constexpr int sm90_fwd_rows(int d_head) { return cuda_sizes::flash_sm90_fwd_rows(d_head); }
bool sm90_flash_available();
template <int kD, bool kCausal>
void fwd_sm90_launch(const FlashParams& p, cudaStream_t s);
template <int kD, bool kCausal>
void bwd_sm90_launch(const FlashBwdParams& p, cudaStream_t s);
/// True when fwd_launch takes the Hopper kernel for this problem: built and available, d_head 64, 80, 96 or 128, and at
/// least one query tile for every third SM (cuda_sizes::flash_sm90_fwd_enough_tiles, with the measurements; fewer
/// tiles take the mma.sync kernel and its split keys).
/// bwd_launch takes the Hopper backward for every problem with d_head 64, 80, 96 or 128 when built and available
/// (uses_sm90_bwd): with few key tiles it splits the query loop itself (not in deterministic mode, whose dQ goes in in
/// key-tile order).
bool uses_sm90_fwd(int d_head, int64_t seq_len, int64_t heads, int64_t batch);
bool uses_sm90_bwd(int d_head);

}  // namespace trainer::flash
