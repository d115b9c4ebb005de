// FlashAttention-2 parameters: one struct that records where every operand lives and how it is laid out, passed by
// value to the kernels (flash-attention `csrc/flash_attn/src/flash.h`, Flash_fwd_params / Flash_bwd_params), and
// bool_switch, which turns a runtime flag into a template parameter (flash-attention `src/static_switch.h`).
//
// Layout: every [B, T, H, d_head] operand is a strided view, element (b, t, h, i) at
//   ptr + b * batch_stride + t * row_stride + h * head_stride + i        (strides in elements, i contiguous)
// so q, k and v are read straight out of qkv [B*T, 3D] (row_stride 3D, head_stride d_head, k = q + D, v = q + 2D)
// and out/dout are [B*T, D] (row_stride D). lse and the backward's workspaces are dense [B, H, T] (and [B, H, T, d]).
// Plain C++ (no CUDA types) so host code compiled by g++ can fill it.
#pragma once
#include <cstdint>
#include <type_traits>

namespace trainer::flash {

struct FlashParams {
  const void *q = nullptr, *k = nullptr, *v = nullptr;  // bf16 or f32 (is_bf16), [B, T, H, d] views (qkv strides)
  void* o = nullptr;                                    // out, [B, T, H, d] view (o strides); f32 when o_f32
  float* lse = nullptr;                                 // [B, H, T] natural-log logsumexp of the scaled, masked scores
  int64_t qkv_batch_stride = 0, qkv_row_stride = 0, qkv_head_stride = 0;
  int64_t o_batch_stride = 0, o_row_stride = 0, o_head_stride = 0;
  int batch = 0, seq_len = 0, num_heads = 0, d_head = 0;
  float softmax_scale = 1.f;  // usually 1/sqrt(d_head)
  bool causal = false;        // query t sees keys j <= t
  bool is_bf16 = true;        // q, k, v (and dout) are bf16; else f32
  bool o_f32 = false;         // out is f32 (always so when !is_bf16)
  // Split keys (forward of problems with few query tiles; flash-decoding): workspace for the partial results
  // of each key chunk, [S][B, H, T, d] normalised O and [S][B, H, T] logsumexp, f32 (fwd_workspace_bytes).
  float* o_accum = nullptr;
  float* lse_accum = nullptr;
  int fwd_splits = 0;  // set by the launcher: key chunks S (0 or 1: no split)
  int fwd_chunk = 0;   // set by the launcher: key tiles per chunk
  // CTA order of the tile kernels (tile_coord): the tiles of tile_group (batch, head) pairs interleave. 0: the
  // launcher's choice (kTileGroup, launch.h); > 0 is kept (the flash bench sweeps it). Read by the launcher only.
  int tile_group = 0;
};

struct FlashBwdParams : FlashParams {
  const void* dout = nullptr;                  // dO, same dtype as q, [B, T, H, d] view with the o strides
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;  // gradients, [B, T, H, d] views with the dqkv strides (written)
  int64_t dqkv_batch_stride = 0, dqkv_row_stride = 0, dqkv_head_stride = 0;
  bool dqkv_f32 = false;                       // gradients stored as f32 (always so when !is_bf16)
  float* dsum = nullptr;                       // workspace [B, H, T]: D = rowsum(dO o O)
  float* dq_accum = nullptr;  // workspace [B, H, T, d] f32 (atomic mode; deterministic on the Hopper backward too)
  // bitwise reproducible: the Hopper backward (bf16, d 64 / 80 / 96 / 128 on compute capability 9.0) adds each dQ
  // tile's contributions in key-tile order (dq_ordered); the mma.sync kernels take dQ by a separate pass
  bool deterministic = false;
  float* dkv_accum = nullptr;  // workspace [2][B, H, T, d] f32 (dK then dV) where the problem has few key tiles
                               // (bwd_workspace_bytes); lets the launcher split each key tile's query loop
  int dkdv_chunk = 0;          // set by the launcher: query tiles per CTA of the dK/dV pass (0: all of them)
  bool dq_accum_swizzled = false;  // set by the launcher: dq_accum rows hold 16-byte chunks swizzled (dq_swizzle
                                   // below; the Hopper backward writes them so)
  // workspace [B, H, ceil(T / 64)] u32 (cuda_sizes::flash_dq_tile_words_per_head), one word per dQ tile of the
  // Hopper backward: its contributions' tickets (bits 0-30) and bit 31 once the first contribution, stored rather than
  // added, is in dq_accum (with dq_ordered: the count of contributions in). Zeroed by the preprocess instead of
  // dq_accum. Null (the mma.sync kernels, the flash bench's variants): the preprocess zeroes dq_accum and every
  // contribution is added. Later contributions spin until the first is in: the Hopper
  // kernel must follow the preprocess that zeroed these words, with no other backward on the same workspace at once
  // (else it may hang, not only be wrong).
  unsigned* dq_tile_state = nullptr;
  // set by the Hopper launcher in deterministic mode: each dQ tile's contributions go in in key-tile order, counted by
  // its dq_tile_state word (bwd_sm90.cuh, dq_tile_wait_turn), the query loop runs from the last tile down and the
  // dK / dV loop never splits
  bool dq_ordered = false;
};

#ifdef __CUDACC__
/// A tile kernel CTA's coordinates: tile index (0 = the CTA the kernel wants first) of `tiles`, batch and head.
struct TileCoord {
  int tile, tiles, b, h;
};
/// Coordinates of this CTA on the tile kernels' grid (G, tiles, ceil(batch x heads / G)) (launch.h, tile_grid): CTAs
/// start in blockIdx order, x fastest, so the (b, h) pairs run in groups of G, one group after the other, and inside
/// a group tile t of every pair before tile t + 1 of any. The kernels number their longest (causal) tiles first, so
/// the longest tiles of G heads start together and the last wave holds short tiles (load balance), while the CTAs in
/// flight read the K / V of about G heads (L2 reuse). The last group may have CTAs past the last pair: b >= batch
/// (the kernel returns at once). Every tile kernel takes this order, the Hopper backward too since the sixteenth
/// session (before, it ran each head's key tiles in turn).
__device__ __forceinline__ TileCoord tile_coord(const FlashParams& p) {
  const int bh = int(blockIdx.z * gridDim.x + blockIdx.x);
  return {int(blockIdx.y), int(gridDim.y), bh / p.num_heads, bh % p.num_heads};
}
#endif

#if defined(__CUDACC__)
#define TRAINER_FLASH_HD __host__ __device__ __forceinline__
#else
#define TRAINER_FLASH_HD inline
#endif
/// Column at which element (row t, column c) of a dq_accum row is stored when p.dq_accum_swizzled: 16-byte chunks
/// swizzled per row, so that the Hopper backward's 64-bit fragment stores into its shared f32 dQ tile hit every bank
/// once a half-warp (its bulk reduction copies the tile as it is; the convert pass reads back through this). A
/// half-warp stores rows t % 8 in 0..3 (or 4..7), two adjacent chunks (2j, 2j + 1) a row:
/// · d % 32 == 0 (64, 96, 128; rows a multiple of 128 bytes): chunk c / 4 at c / 4 ^ 2 (t % 4), four rows' pairs on
///   eight distinct chunks mod 8 (the twentieth session's c / 4 ^ t % 8 put them on four: a 2-way conflict);
/// · d 80 (rows 320 bytes: odd rows start 64 bytes into a bank line): whole groups of eight chunks at c / 4 ^ t % 8,
///   the last four (16..19) at c / 4 ^ t % 4.
/// Its own inverse, a permutation of each row's chunks; d 64, 80, 96 or 128. Checked on the CPU by counting the
/// stores' wavefronts (tests/test_flash_reference.cpp); kernels/flash_attn/NOTES.md, twenty-first session.
TRAINER_FLASH_HD int dq_swizzle(int t, int c, int d) {
  if (d % 32 == 0) return (((c >> 2) ^ ((t & 3) << 1)) << 2) | (c & 3);
  const int chunk = c >> 2, x = (chunk | 7) < (d >> 2) ? (t & 7) : (t & 3);
  return ((chunk ^ x) << 2) | (c & 3);
}

/// Calls f(std::true_type) or f(std::false_type): `bool_switch(p.causal, [&](auto c) { constexpr bool kC = c; })`.
template <class F>
void bool_switch(bool b, F&& f) {
  b ? f(std::true_type{}) : f(std::false_type{});
}

}  // namespace trainer::flash
