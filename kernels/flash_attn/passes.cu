// The passes around the FlashAttention-2 kernels, for every dtype: the backward's preprocess (D = rowsum(dO o O)) and
// dQ / dK / dV conversion, and the host side of the split paths: the split rules
// (fwd_split_count, dkdv_chunk) and the forward's combine.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "align.h"
#include "backend/cuda_sizes.h"
#include "flash_attn/bwd_kernel.cuh"
#include "flash_attn/fwd_kernel.cuh"
#include "flash_attn/launch.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace trainer::flash {
namespace {

/// dsum[b, h, t] = sum_i dO[b, t, h, i] O[b, t, h, i] (fp32), for every (b, t, h) row; TI: dO's dtype, TO: O's.
/// A group of G lanes per row (G: the power of two at or below d / 8, 2 to 16), rows in their memory order, so that
/// a warp reads 32 / G consecutive rows (contiguous in the [B, T, H, d] layout) with 16-byte loads; lane l sums
/// columns 8 l .. 8 l + 7, then 8 (l + G) .. and on, in order, and the group adds its lanes by shuffles (a fixed
/// tree: the same bits every run). vec: 16-byte loads (O and dO rows 16-byte aligned), else element by element in
/// the same order. zero_dq / zero_dkv: the grid also zeroes dq_accum [B, H, T, d] (or, where p.dq_tile_state is
/// given, those words instead, 4-byte stores) and dkv_accum's two [B, H, T, d] halves with coalesced 16-byte stores,
/// for the atomic passes that follow (d % 8 == 0; the workspaces 16-byte aligned). Grid: ceil(rows G / 256) blocks
/// of 256; Index: uint32_t where rows G fits, else int64_t.
/// Measured (ncu, one H200; results/h200/2026-12-04/v24/call5, call6): before the twenty-fourth session one thread
/// took a row, and a warp's 16-byte loads fell 32 rows apart, reading 216 MB for O and dO's 134 at 16 heads x d 128,
/// T 16384: 122-124 us, now 65-68 (G 8: 69-70); xl's 4 x 32 x 80, T 512: 14.4-15.6 -> 13.4-13.7 us (d 80 is 10
/// octets: G 16, with 6 idle lanes a row, took 15.1-15.8, G 2 / 4 13.7-14.3 / 13.4-14.1); small's 4 x 12 x 64:
/// 6.8-7.4 -> 5.6-6.0.
template <class TI, class TO, int G, class Index>
__global__ void __launch_bounds__(256) flash_bwd_preprocess_kernel(const FlashBwdParams p, bool zero_dq,
                                                                   bool zero_dkv, bool vec) {
  const Index H = Index(p.num_heads), T = Index(p.seq_len), rows = Index(p.batch) * T * H;
  const Index tid = Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x);
  const Index row = tid / Index(G);
  const int l = int(threadIdx.x % G), d = p.d_head;
  float acc = 0.f;
  if (row < rows) {
    const Index bt = row / H, h = row - bt * H, b = bt / T, tt = bt - b * T;
    const int64_t ro = int64_t(b) * p.o_batch_stride + int64_t(tt) * p.o_row_stride + int64_t(h) * p.o_head_stride;
    const TI* dO = static_cast<const TI*>(p.dout) + ro;
    const TO* O = static_cast<const TO*>(p.o) + ro;
    for (int c = 8 * l; c < d; c += 8 * G) {
      float a[8], o[8];
      if (vec) {
        load8(dO + c, a);
        load8(O + c, o);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] = float(dO[c + k]), o[k] = float(O[c + k]);
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) acc = fmaf(a[k], o[k], acc);
    }
  }
#pragma unroll
  for (int off = G / 2; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);  // every lane: full warps
  if (row < rows && l == 0) {
    const Index bt = row / H, h = row - bt * H, b = bt / T, tt = bt - b * T;
    p.dsum[(int64_t(b) * p.num_heads + int64_t(h)) * p.seq_len + int64_t(tt)] = acc;
  }
  const int64_t threads = int64_t(gridDim.x) * blockDim.x, n4 = int64_t(rows) * d / 4;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  if (zero_dq && p.dq_tile_state) {  // the Hopper backward's dQ tile words instead (it stores each tile's first)
    const int64_t words = int64_t(p.batch) * p.num_heads * cuda_sizes::flash_dq_tile_words_per_head(p.seq_len);
    for (int64_t i = int64_t(tid); i < words; i += threads) p.dq_tile_state[i] = 0u;
  } else if (zero_dq) {
    float4* z = reinterpret_cast<float4*>(p.dq_accum);
    for (int64_t i = int64_t(tid); i < n4; i += threads) z[i] = zero;
  }
  if (zero_dkv) {
    float4* z = reinterpret_cast<float4*>(p.dkv_accum);
    for (int64_t i = int64_t(tid); i < 2 * n4; i += threads) z[i] = zero;
  }
}

/// The preprocess kernel for TI / TO with G lanes a row: the power of two at or below d / 8, from 2 to 16.
template <class TI, class TO>
void launch_preprocess(const FlashBwdParams& p, bool zero_dq, bool zero_dkv, bool vec, cudaStream_t s) {
  const int64_t rows = int64_t(p.batch) * p.seq_len * p.num_heads;
  auto go = [&](auto g) {
    constexpr int G = decltype(g)::value;
    const int64_t threads = rows * G;
    const unsigned blocks = unsigned(ceil_div<int64_t>(threads, 256));
    if (int64_t(blocks) * 256 <= int64_t(UINT32_MAX))
      flash_bwd_preprocess_kernel<TI, TO, G, uint32_t><<<blocks, 256, 0, s>>>(p, zero_dq, zero_dkv, vec);
    else
      flash_bwd_preprocess_kernel<TI, TO, G, int64_t><<<blocks, 256, 0, s>>>(p, zero_dq, zero_dkv, vec);
  };
  // The head dims the kernels take (16, 32, 64, 80, 96, 128: flash_supports_head_dim) give G 2 .. 16; any other d
  // would still be summed right (lanes past the row add nothing, columns past 8 G loop).
  const int octets = ceil_div(p.d_head, 8);
  if (octets < 4) go(std::integral_constant<int, 2>{});
  else if (octets < 8) go(std::integral_constant<int, 4>{});
  else if (octets < 16) go(std::integral_constant<int, 8>{});
  else go(std::integral_constant<int, 16>{});
}

}  // namespace

void launch_bwd_preprocess(const FlashBwdParams& p, bool zero_accum, cudaStream_t s) {
  // The accumulators are zeroed by the same kernel (one launch instead of three: short problems are launch-bound).
  const bool zero_dq = zero_accum, zero_dkv = zero_accum && p.dkdv_chunk > 0;
  // 16-byte loads where every row of O and dO starts 16-byte aligned (they share the strides): a bf16 dO needs
  // strides in multiples of 8 elements, the stricter case (an f32 O with it: 4; fp32 throughout: 4)
  const int widest = p.is_bf16 ? 2 : 4;
  const bool vec = aligned16(p.o) && aligned16(p.dout) &&
                   strides16(p.o_batch_stride, p.o_row_stride, p.o_head_stride, widest);
  if (p.is_bf16) {
    if (p.o_f32)
      launch_preprocess<__nv_bfloat16, float>(p, zero_dq, zero_dkv, vec, s);
    else
      launch_preprocess<__nv_bfloat16, __nv_bfloat16>(p, zero_dq, zero_dkv, vec, s);
  } else {
    launch_preprocess<float, float>(p, zero_dq, zero_dkv, vec, s);
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
