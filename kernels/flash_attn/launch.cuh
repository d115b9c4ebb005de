// Launchers of the bf16 FlashAttention-2 kernels: the tile configuration per head dimension and the launch itself
// (flash-attention `flash_fwd_launch_template.h`: grid (query tiles, heads, batch), dynamic shared memory opted in
// above 48 KiB with cudaFuncSetAttribute). Instantiated once per (d_head, causal) in fwd_d*.cu / bwd_d*.cu so that
// the kernels compile in parallel.
#pragma once
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_kernel.cuh"
#include "flash_attn/launch.h"

#include <type_traits>

namespace trainer::flash {

/// Tile configuration per head dimension (bf16), chosen by the register report (-Xptxas -v) and by measurement on an
/// H200 (NOTES.md): two m16 tiles per warp (FwdTraits/BwdTraits last parameter) for d 64 (forward and backward)
/// and d 128 (forward); one elsewhere (the two-tile versions of those were not measured, or spilled).
template <int kD>
struct Config {
  using Fwd = std::conditional_t<kD == 64, FwdTraits<64, 128, 64, true, 1, 2>,
                                 std::conditional_t<kD == 128, FwdTraits<128, 128, 32, false, 1, 2>,
                                                    FwdTraits<kD, 128, (kD <= 32 ? 128 : 64), (kD <= 64)>>>;
  using Dkdv = std::conditional_t<kD == 64, BwdTraits<64, 128, 32, true, 1, 2>,  // atomic dQ
                                  BwdTraits<kD, 128, (kD <= 64 ? 64 : 32), true>>;
  using DkdvDet = BwdTraits<kD, 128, (kD <= 64 ? 64 : 32), false>;  // deterministic: dQ by its own pass
  using Dq = BwdDqTraits<kD, 64, (kD <= 64 ? 64 : 32)>;
};

template <class K>
void set_smem(K kernel, int bytes) {
  if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <class Tr, bool kCausal>
void launch_fwd(const FlashParams& p, cudaStream_t s) {
  auto kernel = flash_fwd_kernel<Tr, kCausal>;
  set_smem(kernel, Tr::kSmemBytes);
  const dim3 grid(unsigned(ceil_div(p.seq_len, Tr::kBM)), unsigned(p.num_heads), unsigned(p.batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

/// Backward with explicit configurations: dK/dV pass with atomic dQ (Dkdv::kAtomicDQ) then the dQ conversion, or
/// the dK/dV pass without dQ followed by the dQ pass (deterministic).
template <class Dkdv, class Dq, bool kCausal>
void launch_bwd(const FlashBwdParams& p, cudaStream_t s) {
  launch_bwd_preprocess(p, Dkdv::kAtomicDQ, s);
  auto kdkdv = flash_bwd_dkdv_kernel<Dkdv, kCausal>;
  set_smem(kdkdv, Dkdv::kSmemBytes);
  const dim3 grid(unsigned(ceil_div(p.seq_len, Dkdv::kBN)), unsigned(p.num_heads), unsigned(p.batch));
  kdkdv<<<grid, Dkdv::kThreads, Dkdv::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
  if constexpr (Dkdv::kAtomicDQ) {
    launch_bwd_convert_dq(p, s);
  } else {
    auto kdq = flash_bwd_dq_kernel<Dq, kCausal>;
    set_smem(kdq, Dq::kSmemBytes);
    const dim3 g2(unsigned(ceil_div(p.seq_len, Dq::kBM)), unsigned(p.num_heads), unsigned(p.batch));
    kdq<<<g2, Dq::kThreads, Dq::kSmemBytes, s>>>(p);
    CUDA_CHECK(cudaGetLastError());
  }
}

// Per (d_head, causal), instantiated in fwd_d*.cu and bwd_d*.cu.
template <int kD, bool kCausal>
void fwd_launch(const FlashParams& p, cudaStream_t s) {
  launch_fwd<typename Config<kD>::Fwd, kCausal>(p, s);
}
template <int kD, bool kCausal>
void bwd_launch(const FlashBwdParams& p, cudaStream_t s) {
  if (p.deterministic)
    launch_bwd<typename Config<kD>::DkdvDet, typename Config<kD>::Dq, kCausal>(p, s);
  else
    launch_bwd<typename Config<kD>::Dkdv, typename Config<kD>::Dq, kCausal>(p, s);
}

}  // namespace trainer::flash
