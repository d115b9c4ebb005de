// Launchers of the mma.sync FlashAttention-2 kernels (bf16, and fp32 as 3xTF32): the tile configuration per head
// dimension and dtype and the launch itself (flash-attention `flash_fwd_launch_template.h`; the grid of tile_grid,
// whose CTA order is tile_coord's; dynamic shared memory opted in above 48 KiB with cudaFuncSetAttribute).
// Instantiated once per (d_head, causal) in fwd_d*.cu / bwd_d*.cu so that the kernels compile in parallel.
#pragma once
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_kernel.cuh"
#include "flash_attn/launch.h"

#include <atomic>
#include <type_traits>

namespace trainer::flash {

/// Tile configuration per head dimension (bf16), chosen by the register report (-Xptxas -v) and by measurement on an
/// H200 (NOTES.md; results/h200x2/2026-11-30/v3/flash_xl): two m16 tiles per warp (FwdTraits/BwdTraits last
/// parameter) for d 64, 80 and 128 forward and d 64 backward. d 80 (the xl model): forward 128 x 64, Q in
/// registers; backward 64 keys x 64 queries, 4 warps (T 512: fwd 0.055 -> 0.046 ms, bwd 0.199 -> 0.163; T 2048:
/// 0.474 -> 0.368, 1.679 -> 1.420); d 96 takes d 80's tiles (not tuned: on Hopper the wgmma kernels run it). d 128
/// forward: 256 x 64 tiles, 8 warps x 2 (16 x 128, T 16384: 3.75 -> 3.61 ms, 293 -> 304 TFLOP/s).
/// FwdShort / DkdvShort: the configuration used when the main one would launch fewer than two CTAs per SM (short
/// sequences, few heads; see few_ctas): smaller tiles, more CTAs (d 64 at 4 x 12 heads, T 512: fwd 0.0215 -> 0.0174
/// ms, bwd 0.0695 -> 0.0652; d 128: the 128-row forward). Where they equal the main ones, one kernel is compiled.
template <int kD, bool kF32 = false>
struct Config {
  using Fwd = std::conditional_t<
      kD == 64, FwdTraits<64, 128, 64, true, 1, 2>,
      std::conditional_t<kD == 128, FwdTraits<128, 256, 64, false, 1, 2>,
                         std::conditional_t<kD == 80 || kD == 96, FwdTraits<kD, 128, 64, true, 1, 2>,
                                            FwdTraits<kD, 128, (kD <= 32 ? 128 : 64), (kD <= 64)>>>>;
  using FwdShort = std::conditional_t<kD == 64, FwdTraits<64, 64, 64, true>,
                                      std::conditional_t<kD == 128, FwdTraits<128, 128, 32, false, 1, 2>, Fwd>>;
  using Dkdv = std::conditional_t<kD == 64, BwdTraits<64, 128, 32, true, 1, 2>,  // atomic dQ
                                  std::conditional_t<kD == 80 || kD == 96, BwdTraits<kD, 64, 64, true>,
                                                     BwdTraits<kD, 128, (kD <= 64 ? 64 : 32), true>>>;
  using DkdvShort = std::conditional_t<kD == 64, BwdTraits<64, 64, 64, true>, Dkdv>;
  using DkdvDet = BwdTraits<kD, 128, (kD <= 64 ? 64 : 32), false>;  // deterministic: dQ by its own pass
  using Dq = BwdDqTraits<kD, 64, (kD <= 64 ? 64 : 32)>;
};

/// fp32 (3xTF32, three tf32 mmas per product; mma.cuh): fp32 tiles take twice the shared memory of bf16 ones and the
/// split fragments twice the registers, so 64-row tiles, one m16 tile per warp, Q read from shared memory, 32-key
/// tiles from d 80 and 16-query tiles in the d 128 backward: two CTAs per SM (the deterministic dQ pass at d 128:
/// one). d 64 forward: 128 rows, two m16 tiles per warp (each K / V fragment split once for both; 16 x 64, T 16384:
/// 10.31 -> 9.36 ms, flash bench variants 40 / 41), the 64-row tiles where that gives few CTAs. The other few-CTA
/// configurations equal the main ones (the split paths cover short sequences).
template <int kD>
struct Config<kD, true> {
  using FwdShort = FwdTraits<kD, 64, (kD <= 64 ? 64 : 32), false, 1, 1, float>;
  using Fwd = std::conditional_t<kD == 64, FwdTraits<64, 128, 64, false, 1, 2, float>, FwdShort>;
  using Dkdv = BwdTraits<kD, 64, (kD <= 80 ? 32 : 16), true, 1, 1, float>;
  using DkdvShort = Dkdv;
  using DkdvDet = BwdTraits<kD, 64, (kD <= 80 ? 32 : 16), false, 1, 1, float>;
  using Dq = BwdDqTraits<kD, 64, (kD <= 64 ? 64 : 32), 1, float>;
};

/// True when tiles of `rows` rows give fewer than two CTAs per SM of the current device for this problem
/// (ceil(T / rows) x heads x batch). SM counts are cached per device.
inline bool few_ctas(int64_t seq_len, int64_t heads, int64_t batch, int rows) {
  return ceil_div(seq_len, int64_t(rows)) * heads * batch < 2 * int64_t(device_sm_count());
}

/// Forward with tile configuration Tr; with p.o_accum given (fwd_workspace_bytes reserved it for this problem) and
/// few query tiles, split keys (fwd_split_count chunks) and combine.
template <class Tr, bool kCausal>
void launch_fwd(const FlashParams& p_in, cudaStream_t s) {
  FlashParams p = p_in;
  p.tile_group = tile_group(p);
  const int splits = p.o_accum ? fwd_split_count(p.seq_len, Tr::kBM, Tr::kBN, int64_t(p.batch) * p.num_heads) : 1;
  p.fwd_splits = splits > 1 ? splits : 0;
  p.fwd_chunk = int(ceil_div(ceil_div(p.seq_len, Tr::kBN), splits));
  auto kernel = splits > 1 ? flash_fwd_kernel<Tr, kCausal, true> : flash_fwd_kernel<Tr, kCausal, false>;
  set_smem(kernel, Tr::kSmemBytes);
  kernel<<<tile_grid(p, ceil_div(p.seq_len, Tr::kBM) * splits), Tr::kThreads, Tr::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
  if (splits > 1) launch_fwd_combine(p, s);
}

/// Backward with explicit configurations: dK/dV pass with atomic dQ (Dkdv::kAtomicDQ) then the dQ conversion, or
/// the dK/dV pass without dQ followed by the dQ pass (deterministic). In atomic mode with few key tiles (and
/// p.dkv_accum given) the dK/dV pass splits each key tile's query loop over several CTAs (dkdv_chunk) and a convert
/// pass writes dK, dV.
template <class Dkdv, class Dq, bool kCausal>
void launch_bwd(const FlashBwdParams& p_in, cudaStream_t s) {
  FlashBwdParams p = p_in;
  p.tile_group = tile_group(p);
  p.dq_tile_state = nullptr;  // these kernels add every contribution into a zeroed dq_accum
  const int n_blocks = int(ceil_div(p.seq_len, Dkdv::kBN));
  int splits = 1;
  p.dkdv_chunk = 0;
  if (Dkdv::kAtomicDQ && p.dkv_accum) {
    p.dkdv_chunk = dkdv_chunk(p.seq_len, Dkdv::kBN, Dkdv::kBM, int64_t(p.batch) * p.num_heads, kCausal, false);
    if (p.dkdv_chunk > 0) splits = int(ceil_div(ceil_div(p.seq_len, Dkdv::kBM), p.dkdv_chunk));
  }
  launch_bwd_preprocess(p, Dkdv::kAtomicDQ, s);  // (zeroes dkv_accum too when the pass splits: p.dkdv_chunk)
  auto kdkdv = flash_bwd_dkdv_kernel<Dkdv, kCausal, false>;
  if constexpr (Dkdv::kAtomicDQ)
    if (splits > 1) kdkdv = flash_bwd_dkdv_kernel<Dkdv, kCausal, true>;
  set_smem(kdkdv, Dkdv::kSmemBytes);
  kdkdv<<<tile_grid(p, int64_t(n_blocks) * splits), Dkdv::kThreads, Dkdv::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
  if constexpr (Dkdv::kAtomicDQ) {
    launch_bwd_convert(p, splits > 1, s);
  } else {
    auto kdq = flash_bwd_dq_kernel<Dq, kCausal>;
    set_smem(kdq, Dq::kSmemBytes);
    kdq<<<tile_grid(p, ceil_div(p.seq_len, Dq::kBM)), Dq::kThreads, Dq::kSmemBytes, s>>>(p);
    CUDA_CHECK(cudaGetLastError());
  }
}

// Per (d_head, causal, dtype), instantiated in fwd_d*.cu and bwd_d*.cu. The Hopper kernels (bf16) where
// uses_sm90_*; else the FlashAttention-2 kernels above (mma.sync; bf16 or 3xTF32), with their split paths for
// problems with few tiles.
template <int kD, bool kCausal, bool kF32>
void fwd_launch(const FlashParams& p, cudaStream_t s) {
#ifdef TRAINER_SM90
  if constexpr (!kF32 && cuda_sizes::flash_sm90_head_dim(kD))
    if (uses_sm90_fwd(kD, p.seq_len, p.num_heads, p.batch)) return fwd_sm90_launch<kD, kCausal>(p, s);
#endif
  using C = Config<kD, kF32>;
  if constexpr (!std::is_same_v<typename C::FwdShort, typename C::Fwd>) {
    if (few_ctas(p.seq_len, p.num_heads, p.batch, C::Fwd::kBM)) return launch_fwd<typename C::FwdShort, kCausal>(p, s);
  }
  launch_fwd<typename C::Fwd, kCausal>(p, s);
}
template <int kD, bool kF32>
int fwd_splits(int seq_len, int64_t bh) {
  using C = Config<kD, kF32>;
  if (!std::is_same_v<typename C::FwdShort, typename C::Fwd> && few_ctas(seq_len, bh, 1, C::Fwd::kBM))
    return fwd_split_count(seq_len, C::FwdShort::kBM, C::FwdShort::kBN, bh);
  return fwd_split_count(seq_len, C::Fwd::kBM, C::Fwd::kBN, bh);
}
template <int kD, bool kF32>
int bwd_dkdv_chunk(int seq_len, int64_t bh, bool causal) {
  using C = Config<kD, kF32>;
  if (!std::is_same_v<typename C::DkdvShort, typename C::Dkdv> && few_ctas(seq_len, bh, 1, C::Dkdv::kBN))
    return dkdv_chunk(seq_len, C::DkdvShort::kBN, C::DkdvShort::kBM, bh, causal, false);
  return dkdv_chunk(seq_len, C::Dkdv::kBN, C::Dkdv::kBM, bh, causal, false);
}
template <int kD, bool kCausal, bool kF32>
void bwd_launch(const FlashBwdParams& p, cudaStream_t s) {
#ifdef TRAINER_SM90
  if constexpr (!kF32 && cuda_sizes::flash_sm90_head_dim(kD))
    if (uses_sm90_bwd(kD)) return bwd_sm90_launch<kD, kCausal>(p, s);  // deterministic: its ordered dQ
#endif
  using C = Config<kD, kF32>;
  if (p.deterministic) return launch_bwd<typename C::DkdvDet, typename C::Dq, kCausal>(p, s);
  if constexpr (!std::is_same_v<typename C::DkdvShort, typename C::Dkdv>) {
    if (few_ctas(p.seq_len, p.num_heads, p.batch, C::Dkdv::kBN))
      return launch_bwd<typename C::DkdvShort, typename C::Dq, kCausal>(p, s);
  }
  launch_bwd<typename C::Dkdv, typename C::Dq, kCausal>(p, s);
}

}  // namespace trainer::flash
