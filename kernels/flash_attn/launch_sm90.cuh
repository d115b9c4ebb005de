// Launchers of the Hopper (sm_90a, wgmma) FlashAttention kernels for one tile configuration, as launch.cuh's
// launch_fwd / launch_bwd are for the mma.sync kernels: used by sm90.cu (the production configuration per head
// dimension) and by the flash bench's tile variants (launch/flash_bench/sm90_capi.cu). Compile for sm_90a only.
#pragma once
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>

#include "flash_attn/bwd_sm90.cuh"
#include "flash_attn/fwd_sm90.cuh"
#include "flash_attn/launch.h"

namespace trainer::flash::sm90 {

/// TMA tensor maps of p's q, k, v views (boxes of q_rows / kv_rows rows); the backward adds dout's. Host, per launch.
inline TmaMaps qkv_tma_maps(const FlashParams& p, int q_rows, int kv_rows) {
  const int B = p.batch, T = p.seq_len, H = p.num_heads, d = p.d_head;
  const int64_t bs = p.qkv_batch_stride, rs = p.qkv_row_stride, hs = p.qkv_head_stride;
  TmaMaps maps;
  maps.q = encode_tma_bf16(p.q, B, T, H, d, bs, rs, hs, q_rows);
  maps.k = encode_tma_bf16(p.k, B, T, H, d, bs, rs, hs, kv_rows);
  maps.v = encode_tma_bf16(p.v, B, T, H, d, bs, rs, hs, kv_rows);
  return maps;
}

/// The counter slot (g_fwd_tiles) of the next persistent forward launch: launches in turn, over every tile
/// configuration (one count for the process), take slots 0 .. kFwdSlots - 1 cyclically.
inline int next_fwd_slot() {
  static std::atomic<unsigned> launches{0};
  return int(launches.fetch_add(1, std::memory_order_relaxed) % kFwdSlots);
}

/// Forward with tile configuration Tr (FwdTraits): ceil(T / kBM) x H x B CTAs (tile_grid), or (Tr::kPersistent) one
/// per SM up to that many, taking the tiles from the counters of slot launch_count % kFwdSlots (FwdTileCounter); the
/// inputs also as TMA tensor maps (encoded here per call). CUDA errors abort (CUDA_CHECK); more than 2^31 - 1 - SMs
/// tiles (int indices) throw std::invalid_argument.
template <class Tr, bool kCausal>
void launch_fwd(const FlashParams& p_in, cudaStream_t s) {
  FlashParams p = p_in;
  p.tile_group = tile_group(p);
  auto kernel = flash_fwd_sm90_kernel<Tr, kCausal>;
  set_smem(kernel, Tr::kSmemBytes);
  const TmaMaps maps = qkv_tma_maps(p, Tr::kBM, Tr::kBN);
  const int64_t tiles = ceil_div(p.seq_len, Tr::kBM), total = tiles * p.batch * p.num_heads;
  dim3 grid = tile_grid(p, tiles);
  int slot = 0;
  if constexpr (Tr::kPersistent) {
    const int64_t sms = device_sm_count();
    if (total > int64_t(INT32_MAX) - sms) throw std::invalid_argument("flash forward: too many query tiles");
    grid = dim3(unsigned(std::min(total, sms)));
    slot = next_fwd_slot();
  }
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, s>>>(p, maps, slot);
  CUDA_CHECK(cudaGetLastError());
}

/// Backward with tile configuration Tr (BwdTraits): preprocess (D; zeroed dQ tile words, or dq_accum where
/// p.dq_tile_state is null, and dkv_accum when split), the dK/dV/dQ kernel (its
/// inputs also as TMA tensor maps, encoded here per call), the convert pass (dQ, and dK / dV when split). With few
/// key tiles and p.dkv_accum given (bwd_workspace_bytes reserves it by the same rule) each key tile's query loop is
/// split over CTAs (dkdv_chunk's Hopper rule: one CTA per SM, the split must halve the time).
template <class Tr, bool kCausal>
void launch_bwd(const FlashBwdParams& p_in, cudaStream_t s) {
  FlashBwdParams p = p_in;
  p.dq_accum_swizzled = true;
  p.dq_ordered = p.deterministic;  // dQ's contributions in key-tile order (the tile words count them), never split
  TRAINER_CHECK(!p.dq_ordered || p.dq_tile_state, "flash2 bwd: the deterministic Hopper backward needs the dQ tile "
                "words (bind_bwd_workspace)");
  p.dkdv_chunk = p.dkv_accum && !p.dq_ordered
                     ? dkdv_chunk(p.seq_len, Tr::kBN, Tr::kBM, int64_t(p.batch) * p.num_heads, kCausal, true)
                     : 0;
  const int splits = p.dkdv_chunk > 0 ? int(ceil_div(ceil_div(p.seq_len, Tr::kBM), p.dkdv_chunk)) : 1;
  launch_bwd_preprocess(p, true, s);
  auto kernel = splits > 1 ? flash_bwd_sm90_kernel<Tr, kCausal, true> : flash_bwd_sm90_kernel<Tr, kCausal>;
  set_smem(kernel, Tr::kSmemBytes);
  // The tile kernels' grid and CTA order (tile_grid, tile_coord): tile t of a group of heads before tile t + 1, so
  // that short problems end on their short key tiles. (Until the sixteenth session: each head's key tiles in turn.)
  p.tile_group = tile_group(p);
  const dim3 grid = tile_grid(p, ceil_div(p.seq_len, Tr::kBN) * splits);
  TmaMaps maps = qkv_tma_maps(p, Tr::kBM, Tr::kBN);
  maps.dout = encode_tma_bf16(p.dout, p.batch, p.seq_len, p.num_heads, p.d_head, p.o_batch_stride, p.o_row_stride,
                              p.o_head_stride, Tr::kBM);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, s>>>(p, maps);
  CUDA_CHECK(cudaGetLastError());
  launch_bwd_convert(p, splits > 1, s);
}

}  // namespace trainer::flash::sm90
