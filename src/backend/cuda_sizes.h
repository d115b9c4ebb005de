// Sizes of the CUDA backend's own device allocations, as host functions that compile without CUDA: the CUDA backend
// (backend/cuda, kernels/) allocates by them and the meta backend (backend/meta) mirrors them, so the planner's peak
// includes the backend's workspace. One definition each; where the CUDA code decides by the GPU (SM count, Hopper
// kernels) the meta backend uses the H200's answer, approximated below (flash_* and embedding_bwd: a few MiB at most,
// next to GiB of activations).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace trainer::cuda_sizes {

inline constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;  // cuBLASLt workspace: NVIDIA recommends 32 MiB
inline constexpr size_t kScratchRound = size_t(1) << 20;           // the scratch buffer grows in whole MiB
inline constexpr int kReduceMaxBlocks = 1024;  // fp64 partial sums of the deterministic reductions (+1: the result)
// rmsnorm_bwd: each block takes a run of consecutive rows and keeps a dw row; at least kRmsnormBwdRows rows each, and
// at most kRmsnormBwdBlocks blocks (rmsnorm_bwd_rows): a partition fixed by N alone, so the dw sum order never depends
// on the device
inline constexpr int kRmsnormBwdBlocks = 1024, kRmsnormBwdRows = 2;
inline constexpr int kH200SmCount = 132;

/// Head dimensions with a FlashAttention-2 kernel (kernels/flash_attn; others fall back to naive attention).
inline bool flash_supports_head_dim(int d) { return d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128; }

inline size_t align256(size_t x) { return (x + 255) / 256 * 256; }

/// The Hopper (wgmma, sm_90a) FlashAttention kernels' head dimensions and tiles (kernels/flash_attn: sm90.cu's
/// configurations, launch.h, flash_api.cu's dispatch; the meta backend's restatement below): bf16, d_head 64, 80, 96
/// and 128; the forward's query tiles of 192 rows (d 128: 128), the backward's of 128 keys x 64 queries (d 64: 128
/// queries; one H200, 16 heads, T 16384, causal: 3.01-3.17 ms against 3.43-3.52, results/h200/2026-12-03/v20).
inline constexpr int kFlashSm90BwdKeyTile = 128;
constexpr int flash_sm90_bwd_query_rows(int d_head) { return d_head == 64 ? 128 : 64; }
constexpr bool flash_sm90_head_dim(int d) { return d == 64 || d == 80 || d == 96 || d == 128; }
constexpr int flash_sm90_fwd_rows(int d_head) { return d_head == 128 ? 128 : 192; }
/// Words of the Hopper backward's dQ tile state (FlashBwdParams::dq_tile_state) per (batch, head): one per 64 query
/// rows (its query tiles are 64 or 128 rows), u32 each.
constexpr int64_t flash_dq_tile_words_per_head(int64_t T) { return (T + 63) / 64; }
/// The Hopper forward runs one CTA per SM; it takes a problem from one query tile for every third of `sms` SMs
/// (fewer go to the mma.sync kernel and its split keys: one H200, causal, d 128, one head: 128 tiles 0.239 ms on the
/// Hopper kernel against 0.439 split, 64 tiles 0.119 against 0.140, 32 tiles 0.075 against 0.066;
/// kernels/flash_attn/NOTES.md, fifteenth session).
inline bool flash_sm90_fwd_enough_tiles(int64_t seq_len, int64_t heads, int64_t batch, int d_head, int64_t sms) {
  const int64_t rows = flash_sm90_fwd_rows(d_head);
  return 3 * ((seq_len + rows - 1) / rows * heads * batch) >= sms;
}

/// The FlashAttention backward's split rule (kernels/flash_attn: dkdv_chunk, with the device's SM count; the meta
/// backend with the H200's): query tiles per CTA of the dK/dV pass for seq_len keys in tiles of kbn and queries in
/// tiles of kbm, bh = batch x heads, on `sms` SMs, for the Hopper kernel (hopper) or the mma.sync kernels. A
/// kernel's SMs hold ctas_per_sm of its CTAs each (Hopper 1, mma.sync 2). 0 (no split) when the key tiles fill every
/// CTA slot; else chunks of at least 2 query tiles such that about four CTAs per SM do the (causal: triangular) work,
/// but only where that makes the time, counted in (key tile, query tile) steps, at least min_gain times shorter:
/// unsplit, the longest key tile's steps (every CTA has a slot); split, the larger of a chunk and an even share of all
/// steps per slot. Splitting costs the dK / dV partial sums (zeroed, added by atomics, converted): next to the
/// mma.sync kernels' long steps any gain pays (min_gain 1: the rule as it was before the fifteenth session); next to
/// the Hopper kernel's short ones the split must halve the time (min_gain 2; one H200, causal, T 512: 4 x 12 heads d
/// 64 0.073 ms split against 0.061 unsplit, 4 x 8 heads d 96 0.070 against 0.052; one head, T 16384: 0.457 split
/// against 0.642; kernels/flash_attn/NOTES.md, fifteenth session). 0 again when one chunk would cover every query
/// tile.
inline int flash_dkdv_chunk(int seq_len, int kbn, int kbm, int64_t bh, bool causal, bool hopper, int64_t sms) {
  const int ctas_per_sm = hopper ? 1 : 2, min_gain = hopper ? 2 : 1;
  const int64_t n_blocks = (int64_t(seq_len) + kbn - 1) / kbn, m_tiles = (int64_t(seq_len) + kbm - 1) / kbm;
  const int64_t slots = int64_t(ctas_per_sm) * sms;
  if (n_blocks * bh >= slots) return 0;
  int64_t pairs = 0;  // (key tile, query tile) pairs the pass visits
  for (int64_t n = 0; n < n_blocks; ++n) pairs += m_tiles - (causal ? n * kbn / kbm : 0);
  const int64_t chunk = std::max<int64_t>(2, (pairs * bh + 4 * sms - 1) / (4 * sms));
  const int64_t share = (pairs * bh + slots - 1) / slots;
  if (chunk >= m_tiles || m_tiles < min_gain * std::max(chunk, share)) return 0;
  return int(chunk);
}

/// Bytes of the reduction partials (Category::workspace, allocated at construction).
inline constexpr size_t reduce_partials_bytes() { return size_t(kReduceMaxBlocks + 1) * sizeof(double); }

/// The scratch buffer's new size when `need` bytes are asked of a buffer of `have` bytes: `have` when it suffices,
/// else max(need, 1.5 have) rounded up to whole MiB.
inline size_t scratch_grown(size_t have, size_t need) {
  if (need <= have) return have;
  const size_t want = std::max(need, have + have / 2);
  return (want + kScratchRound - 1) / kScratchRound * kScratchRound;
}

/// fp32_matmul "3xtf32": the split operands of one fp32 product, hi and lo of A and of B, each in its operand's layout
/// (span_a / span_b elements from the first to the last one touched), every part 256-byte aligned.
inline size_t split_tf32_bytes(int64_t span_a, int64_t span_b) {
  const auto part = [](int64_t n) { return (size_t(n) * sizeof(float) + 255) / 256 * 256; };
  return 2 * (part(span_a) + part(span_b));
}

/// rmsnorm_bwd's rows per block for N rows: max(kRmsnormBwdRows, ceil(N / kRmsnormBwdBlocks)), a multiple of
/// kRmsnormBwdRows; its blocks: ceil(N / rows).
inline int64_t rmsnorm_bwd_rows(int64_t N) {
  const int64_t r = std::max<int64_t>(kRmsnormBwdRows, (N + kRmsnormBwdBlocks - 1) / kRmsnormBwdBlocks);
  return (r + kRmsnormBwdRows - 1) / kRmsnormBwdRows * kRmsnormBwdRows;
}
inline int64_t rmsnorm_bwd_blocks(int64_t N) { return N <= 0 ? 0 : (N + rmsnorm_bwd_rows(N) - 1) / rmsnorm_bwd_rows(N); }
/// rmsnorm_bwd's scratch: one fp32 dw row [D] per block.
inline size_t rmsnorm_bwd_scratch_bytes(int64_t N, int D) {
  return size_t(rmsnorm_bwd_blocks(N)) * size_t(D) * sizeof(float);
}

/// RoPE's (cos, sin) table [T, d_head/2] x 2, fp32.
inline size_t rope_table_bytes(int T, int d_head) { return size_t(T) * size_t(d_head) * sizeof(float); }

/// Naive attention: temporaries per head chunk fit kNaiveChunkBytes (at least one head).
inline constexpr size_t kNaiveChunkBytes = size_t(256) << 20;
inline int naive_heads_per_chunk(size_t per_head, int H) {
  const size_t n = per_head ? kNaiveChunkBytes / per_head : size_t(H);
  return int(std::clamp<size_t>(n, 1, size_t(H)));
}
/// Naive attention forward scratch (0: none): S fp32 [T, T] per head unless it lives in stored fp32 probs, plus a bf16
/// P per head when probs are not stored (flash2 fallback) and the dtype is bf16.
inline size_t naive_attention_fwd_scratch_bytes(const AttnShape& s, DType dtype, bool store) {
  const size_t tt = size_t(s.T) * size_t(s.T);
  const bool s_in_probs = store && dtype == DType::f32, p_scratch = !store && dtype == DType::bf16;
  const size_t per_head = (s_in_probs ? 0 : tt * 4) + (p_scratch ? tt * 2 : 0);
  if (!per_head) return 0;
  const size_t hc = size_t(naive_heads_per_chunk(per_head, s.H));
  return align256(hc * tt * 4) + (p_scratch ? hc * tt * 2 : 0);
}
/// Naive attention backward scratch: dP fp32 (+ bf16 dS) per head, and when P is not stored S fp32 (+ bf16 P).
inline size_t naive_attention_bwd_scratch_bytes(const AttnShape& s, DType dtype, bool stored) {
  const size_t tt = size_t(s.T) * size_t(s.T);
  const bool bf = dtype == DType::bf16;
  const size_t per_head = tt * 4 + (bf ? tt * 2 : 0) + (stored ? 0 : tt * 4 + (bf ? tt * 2 : 0));
  const size_t hc = size_t(naive_heads_per_chunk(per_head, s.H));
  const size_t r32 = align256(hc * tt * 4), r16 = align256(hc * tt * 2);
  return r32 + (bf ? r16 : 0) + (stored ? 0 : r32 + (bf ? r16 : 0));
}

// ---- approximations for the meta backend (the CUDA code decides these on the device) ---------------------------

/// The dispatch of kernels/flash_attn on an H200 (flash_api.cu uses_sm90_fwd / uses_sm90_bwd, by the same rules
/// above, with the H200's SM count and the Hopper kernels taken as built and available). The backward runs the Hopper
/// kernel for every bf16 problem with a flash_sm90_head_dim; the forward when flash_sm90_fwd_enough_tiles too; else
/// the mma.sync kernels.
inline bool flash_bwd_uses_hopper_h200(const AttnShape& s, DType dtype) {
  return dtype == DType::bf16 && flash_sm90_head_dim(s.d_head);
}
inline bool flash_fwd_uses_hopper_h200(const AttnShape& s, DType dtype) {
  return flash_bwd_uses_hopper_h200(s, dtype) && flash_sm90_fwd_enough_tiles(s.T, s.H, s.B, s.d_head, kH200SmCount);
}
/// FlashAttention-2 forward workspace on an H200 (approximation of flash::fwd_workspace_bytes): the forward splits
/// its keys only when the query tiles (128 rows) give fewer than two CTAs per SM; then up to 16 chunks of partial
/// O [B, H, T, d] and lse [B, H, T] f32. Problems that take the Hopper forward (flash_fwd_uses_hopper_h200) never
/// split.
inline size_t flash_fwd_workspace_bytes_h200(const AttnShape& s, DType dtype) {
  const int64_t tiles = (int64_t(s.T) + 127) / 128 * s.B * s.H;
  if (flash_fwd_uses_hopper_h200(s, dtype)) return 0;
  if (tiles >= 2 * kH200SmCount || s.T < 8 * 64) return 0;  // enough CTAs, or fewer than 8 key tiles of 64
  const size_t splits = size_t(std::clamp<int64_t>(4 * kH200SmCount / std::max<int64_t>(tiles, 1), 2, 16));
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T);
  return align256(splits * rows * size_t(s.d_head) * 4) + align256(splits * rows * 4);
}
/// FlashAttention-2 backward workspace on an H200 (approximation of flash::bwd_workspace_bytes). Atomic mode: D
/// [B, H, T], the dQ accumulators [B, H, T, d] f32 and their tile words [B, H, ceil(T / 64)] u32, plus dK / dV
/// accumulators where the dK/dV pass splits its query loop (flash_dkdv_chunk; for the Hopper kernel's tiles, 128 keys
/// x 64 or 128 queries, and its rule where it runs; elsewhere taken as the same tiles under the mma.sync kernels'
/// rule). Deterministic mode: on the Hopper kernel (its dQ in key-tile order) the atomic mode's parts without the
/// split's; on the mma.sync kernels (dQ by a pass of its own) D only.
inline size_t flash_bwd_workspace_bytes_h200(const AttnShape& s, DType dtype, bool deterministic) {
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T);
  const bool hopper = flash_bwd_uses_hopper_h200(s, dtype);
  if (deterministic && !hopper) return align256(rows * 4);
  size_t bytes = align256(rows * 4) + align256(rows * size_t(s.d_head) * 4) +
                 align256(size_t(s.B) * size_t(s.H) * size_t(flash_dq_tile_words_per_head(s.T)) * 4);
  if (!deterministic && flash_dkdv_chunk(int(s.T), kFlashSm90BwdKeyTile, flash_sm90_bwd_query_rows(s.d_head),
                                         int64_t(s.B) * s.H, s.causal, hopper, kH200SmCount) > 0)
    bytes += align256(2 * rows * size_t(s.d_head) * 4);
  return bytes;
}
/// embedding_bwd's scratch (approximation of kernels::embedding_bwd_scratch_bytes): sorted keys and two row index
/// arrays (i32 [N] each) plus CUB's radix-sort temporaries, taken as another two [N] i32 arrays and 1 MiB.
inline size_t embedding_bwd_scratch_bytes_approx(int64_t N) {
  return 3 * align256(size_t(N) * 4) + align256(2 * size_t(N) * 4 + (size_t(1) << 20));
}

}  // namespace trainer::cuda_sizes
