// The passes around the FlashAttention-2 kernels, for every dtype: the backward's preprocess (D = rowsum(dO o O)) and
// dQ / dK / dV conversion, and the host side of the split paths: the device's SM count, the split rules
// (fwd_split_count, dkdv_chunk) and the forward's combine.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "align.h"
#include "backend/cuda_sizes.h"
#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_kernel.cuh"
#include "flash_attn/launch.h"

#include <algorithm>
#include <atomic>

namespace trainer::flash {

void launch_bwd_preprocess(const FlashBwdParams& p, bool zero_accum, cudaStream_t s) {
  const int64_t rows = int64_t(p.batch) * p.seq_len * p.num_heads;
  const unsigned blocks = unsigned(ceil_div<int64_t>(rows, 256));
  // The accumulators are zeroed by the same kernel (one launch instead of three: short problems are launch-bound).
  const bool zero_dq = zero_accum, zero_dkv = zero_accum && p.dkdv_chunk > 0;
  // 16-byte loads where every row of O and dO starts 16-byte aligned (they share the strides): a bf16 dO needs
  // strides in multiples of 8 elements, the stricter case (an f32 O with it: 4; fp32 throughout: 4)
  const int widest = p.is_bf16 ? 2 : 4;
  const bool vec = aligned16(p.o) && aligned16(p.dout) &&
                   strides16(p.o_batch_stride, p.o_row_stride, p.o_head_stride, widest);
  if (p.is_bf16) {
    if (p.o_f32)
      flash_bwd_preprocess_kernel<__nv_bfloat16, float><<<blocks, 256, 0, s>>>(p, zero_dq, zero_dkv, vec);
    else
      flash_bwd_preprocess_kernel<__nv_bfloat16, __nv_bfloat16><<<blocks, 256, 0, s>>>(p, zero_dq, zero_dkv, vec);
  } else {
    flash_bwd_preprocess_kernel<float, float><<<blocks, 256, 0, s>>>(p, zero_dq, zero_dkv, vec);
  }
  CUDA_CHECK(cudaGetLastError());
}

void launch_bwd_convert(const FlashBwdParams& p, bool with_dkv, cudaStream_t s) {
  const int64_t octets = int64_t(p.batch) * p.num_heads * p.seq_len * p.d_head / 8;
  const unsigned blocks = unsigned(ceil_div<int64_t>(octets, 256));
  const bool vec = aligned16(p.dq) && aligned16(p.dk) && aligned16(p.dv) &&
                   strides16(p.dqkv_batch_stride, p.dqkv_row_stride, p.dqkv_head_stride, p.dqkv_f32 ? 4 : 2);
  if (p.dqkv_f32)
    flash_bwd_convert_kernel<float><<<blocks, 256, 0, s>>>(p, with_dkv, vec);
  else
    flash_bwd_convert_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(p, with_dkv, vec);
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

int dkdv_chunk(int seq_len, int kbn, int kbm, int64_t bh, bool causal, bool hopper) {
  return cuda_sizes::flash_dkdv_chunk(seq_len, kbn, kbm, bh, causal, hopper, device_sm_count());
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

}  // namespace trainer::flash
