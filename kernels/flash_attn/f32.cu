// fp32 FlashAttention-2 launchers (kernels in fp32_kernel.cuh; grid (64-row tiles, heads, batch), 256 threads),
// the dtype-generic backward helpers (preprocess D = rowsum(dO o O), the dQ / dK / dV conversion), and the host side
// of the bf16 split paths: the device's SM count, the split rules (fwd_split_count, dkdv_chunk) and the combine.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_kernel.cuh"
#include "flash_attn/fp32_kernel.cuh"
#include "flash_attn/launch.h"

#include <algorithm>
#include <atomic>

namespace trainer::flash {
namespace {

template <class K>
void launch_f32(K kernel, int smem, const FlashParams& p, cudaStream_t s, const void* params) {
  set_smem(kernel, size_t(smem));
  const dim3 grid(unsigned(ceil_div(p.seq_len, kF32Tile)), unsigned(p.num_heads), unsigned(p.batch));
  void* args[] = {const_cast<void*>(params)};
  CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, dim3(kF32Threads), args, size_t(smem), s));
}

template <int kD>
void fwd_f32(const FlashParams& p, cudaStream_t s) {
  launch_f32(flash_fwd_f32_kernel<kD>, F32Traits<kD>::kFwdSmem, p, s, &p);
}

template <int kD>
void bwd_f32(const FlashBwdParams& p, cudaStream_t s) {
  launch_bwd_preprocess(p, false, s);
  launch_f32(flash_bwd_dkdv_f32_kernel<kD>, F32Traits<kD>::kDkdvSmem, p, s, &p);
  launch_f32(flash_bwd_dq_f32_kernel<kD>, F32Traits<kD>::kDqSmem, p, s, &p);
}

}  // namespace

void launch_bwd_preprocess(const FlashBwdParams& p, bool zero_accum, cudaStream_t s) {
  const int64_t rows = int64_t(p.batch) * p.seq_len * p.num_heads;
  const unsigned blocks = unsigned(ceil_div<int64_t>(rows * 32, 256));
  if (p.is_bf16) {
    if (p.o_f32)
      flash_bwd_preprocess_kernel<__nv_bfloat16, float><<<blocks, 256, 0, s>>>(p);
    else
      flash_bwd_preprocess_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, 256, 0, s>>>(p);
  } else {
    flash_bwd_preprocess_kernel<float, float><<<blocks, 256, 0, s>>>(p);
  }
  CUDA_CHECK(cudaGetLastError());
  if (zero_accum)
    CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, size_t(rows) * size_t(p.d_head) * sizeof(float), s));
  if (zero_accum && p.dkdv_chunk > 0)  // the split dK/dV pass adds into dkv_accum [2][B, H, T, d]
    CUDA_CHECK(cudaMemsetAsync(p.dkv_accum, 0, 2 * size_t(rows) * size_t(p.d_head) * sizeof(float), s));
}

void launch_bwd_convert(const FlashBwdParams& p, bool with_dkv, cudaStream_t s) {
  const int64_t pairs = int64_t(p.batch) * p.num_heads * p.seq_len * p.d_head / 2;
  const unsigned blocks = unsigned(ceil_div<int64_t>(pairs, 256));
  if (p.dqkv_f32)
    flash_bwd_convert_kernel<float><<<blocks, 256, 0, s>>>(p, with_dkv);
  else
    flash_bwd_convert_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(p, with_dkv);
  CUDA_CHECK(cudaGetLastError());
}

int device_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sms[kMaxDevices] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int n = dev < kMaxDevices ? sms[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < kMaxDevices) sms[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

int dkdv_chunk(int seq_len, int kbn, int kbm, int64_t bh, bool causal) {
  const int64_t sms = device_sm_count();
  const int n_blocks = ceil_div(seq_len, kbn), m_tiles = ceil_div(seq_len, kbm);
  if (int64_t(n_blocks) * bh >= 2 * sms) return 0;
  int64_t pairs = 0;  // (key tile, query tile) pairs the pass visits
  for (int n = 0; n < n_blocks; ++n) pairs += m_tiles - (causal ? int64_t(n) * kbn / kbm : 0);
  const int chunk = int(std::max<int64_t>(2, ceil_div(pairs * bh, 4 * sms)));
  return chunk < m_tiles ? chunk : 0;
}

int fwd_split_count(int seq_len, int kbm, int kbn, int64_t bh) {
  const int64_t sms = device_sm_count(), ctas = ceil_div<int64_t>(seq_len, kbm) * bh;
  const int n_tiles = ceil_div(seq_len, kbn);
  if (ctas >= 2 * sms || n_tiles < 8) return 1;
  const int64_t want = std::min<int64_t>({kMaxFwdSplits, ceil_div(4 * sms, ctas), n_tiles / 4});
  if (want <= 1) return 1;
  const int chunk = ceil_div(n_tiles, int(want));
  return ceil_div(n_tiles, chunk);  // no chunk left empty by rounding
}

void launch_fwd_combine(const FlashParams& p, cudaStream_t s) {
  TRAINER_CHECK(p.fwd_splits > 1 && p.fwd_splits <= kMaxFwdSplits && p.o_accum && p.lse_accum,
                "flash2: combine of {} key chunks (2 .. {}) without partials", p.fwd_splits, kMaxFwdSplits);
  const int64_t rows = int64_t(p.batch) * p.num_heads * p.seq_len;
  const unsigned blocks = unsigned(ceil_div<int64_t>(rows * 32, 256));
  if (p.o_f32)
    flash_fwd_combine_kernel<float><<<blocks, 256, 0, s>>>(p);
  else
    flash_fwd_combine_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

void fwd_f32_launch(const FlashParams& p, cudaStream_t s) {
  switch (p.d_head) {
    case 16: return fwd_f32<16>(p, s);
    case 32: return fwd_f32<32>(p, s);
    case 64: return fwd_f32<64>(p, s);
    case 80: return fwd_f32<80>(p, s);
    case 128: return fwd_f32<128>(p, s);
    default: TRAINER_CHECK(false, "flash2 fp32: d_head {} not supported", p.d_head);
  }
}

void bwd_f32_launch(const FlashBwdParams& p, cudaStream_t s) {
  switch (p.d_head) {
    case 16: return bwd_f32<16>(p, s);
    case 32: return bwd_f32<32>(p, s);
    case 64: return bwd_f32<64>(p, s);
    case 80: return bwd_f32<80>(p, s);
    case 128: return bwd_f32<128>(p, s);
    default: TRAINER_CHECK(false, "flash2 fp32: d_head {} not supported", p.d_head);
  }
}

}  // namespace trainer::flash
