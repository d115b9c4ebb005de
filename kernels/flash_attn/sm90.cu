// Launchers of the Hopper (sm_90a, wgmma) FlashAttention kernels (fwd_sm90.cuh, bwd_sm90.cuh): bf16, d_head 64 and
// 128, the tile configuration per head dimension chosen by measurement on an H200 (NOTES.md, 2026-12-01 evening).
// Compiled for sm_90a only (CMake object library trainer_flash_sm90; trainer_lib then defines TRAINER_FLASH_SM90,
// which turns on the dispatch in launch.cuh): fwd_launch / bwd_launch call these when uses_sm90_fwd / uses_sm90_bwd.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <atomic>

#include "flash_attn/bwd_sm90.cuh"
#include "flash_attn/fwd_sm90.cuh"
#include "flash_attn/launch.h"

namespace trainer::flash {
namespace {

/// Forward: 128 query rows (2 warpgroups) x 128 keys; d 64 caps registers at 2 CTAs per SM (a few spills, faster:
/// 16 x 64, T 16384, causal: 1.50 vs 1.80 ms). Backward: 128 keys (2 warpgroups) x 64 queries; its query loop split
/// over CTAs when the key tiles give fewer than two CTAs per SM.
template <int kD>
struct Sm90Config {
  using Fwd = std::conditional_t<kD == 64, sm90::FwdTraits<64, 128, 2, 2>, sm90::FwdTraits<128, 128, 2, 1>>;
  using Bwd = sm90::BwdTraits<kD, 2>;
  static_assert(Fwd::kBM == kSm90Tile && Bwd::kBN == kSm90Tile && Bwd::kBM == kSm90BwdQueryTile,
                "launch.h's tile constants (the dispatch and workspace rules) are these");
};

/// Opts the kernel in to `bytes` of dynamic shared memory (above the 48 KiB default); per launch, as launch.cuh does
/// (the attribute belongs to the function; the call costs about a microsecond of host time).
template <class K>
void set_smem(K kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

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
  auto kernel = sm90::flash_fwd_sm90_kernel<Tr, kCausal>;
  set_smem(kernel, Tr::kSmemBytes);
  const dim3 grid(unsigned(ceil_div(p.seq_len, Tr::kBM)), unsigned(p.num_heads), unsigned(p.batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

template <int kD, bool kCausal>
void bwd_sm90_launch(const FlashBwdParams& p_in, cudaStream_t s) {
  using Tr = typename Sm90Config<kD>::Bwd;
  FlashBwdParams p = p_in;
  p.dq_accum_swizzled = true;
  // Few key tiles (short sequences, few heads): split each key tile's query loop (dkdv_chunk, the rule of the
  // mma.sync path; bwd_workspace_bytes reserved dkv_accum by the same rule).
  p.dkdv_chunk = p.dkv_accum ? dkdv_chunk(p.seq_len, Tr::kBN, Tr::kBM, int64_t(p.batch) * p.num_heads, kCausal) : 0;
  const int splits = p.dkdv_chunk > 0 ? int(ceil_div(ceil_div(p.seq_len, Tr::kBM), p.dkdv_chunk)) : 1;
  launch_bwd_preprocess(p, true, s);
  if (splits > 1)
    CUDA_CHECK(cudaMemsetAsync(p.dkv_accum, 0, 2 * size_t(p.batch) * p.num_heads * p.seq_len * p.d_head * 4, s));
  auto kernel = splits > 1 ? sm90::flash_bwd_sm90_kernel<Tr, kCausal, true> : sm90::flash_bwd_sm90_kernel<Tr, kCausal>;
  set_smem(kernel, Tr::kSmemBytes);
  const dim3 grid(unsigned(ceil_div(p.seq_len, Tr::kBN) * splits), unsigned(p.num_heads), unsigned(p.batch));
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
  launch_bwd_convert(p, splits > 1, s);
}

template void fwd_sm90_launch<64, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<64, true>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<128, false>(const FlashParams&, cudaStream_t);
template void fwd_sm90_launch<128, true>(const FlashParams&, cudaStream_t);
template void bwd_sm90_launch<64, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<64, true>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<128, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_sm90_launch<128, true>(const FlashBwdParams&, cudaStream_t);

}  // namespace trainer::flash
