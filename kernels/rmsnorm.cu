// RMSNorm, forward and backward (Zhang & Sennrich 2019, arXiv:1910.07467; DESIGN.md "RMSNorm ... computed in fp32").
//   forward:  r[n] = 1 / sqrt(mean_d x[n,d]^2 + eps);   y[n,d] = (x[n,d] * r[n]) * w[d]
//   backward: with c[n] = mean_d w[d] dy[n,d] x[n,d],
//             dx[n,d] += r[n] (w[d] dy[n,d] - x[n,d] r[n]^2 c[n])        (accumulates into the residual gradient)
//             dw[d]   += sum_n dy[n,d] x[n,d] r[n]                      (fixed-order two-stage sum: deterministic)
// Shapes: x, y, dy, dx [N, D] row-major (f32 or bf16, each its own dtype); w [D] f32 or bf16; r [N] f32; dw [D] f32
// or bf16 (the column sum in fp32, then one rounding per element).
// One block per row (forward); the backward's blocks each take a run of R consecutive rows (R >= 2, fixed by N:
// cuda_sizes::rmsnorm_bwd_rows) and keep their own partial dw row (in shared memory: d_model floats, so d_model <=
// 57856; the bf16 vector kernel in registers, one row at a time). Pattern: llm.c
// `llmc/layernorm.cuh` (layernorm_backward_kernel10 keeps per-block dweight partials and sums them in a second
// step); ggml `src/ggml-cuda/norm.cu` (rms_norm_f32).
#include "common.cuh"
#include "align.h"
#include "rmsnorm.cuh"

#include "backend/cuda_sizes.h"

#include <initializer_list>

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kMaxThreads = 256;
constexpr int kMaxSmemBytes = 226 * 1024;  // Hopper's opt-in limit (227 KiB) less room for static shared
// The backward's partition (backend/cuda_sizes.h, which the planner reads): G = ceil(N / R) blocks of R >= 2
// consecutive rows (the last block's run may be shorter, down to one row), fixed by N (not the SM count) so the dw
// sum order never changes. (Before the sixteenth session: 1024 blocks taking rows b, b + 1024, ... in turn: at N = 2048 two rows each, whose loads, block sum, dx load and
// store ran one after the other; xl's backward took 27 us for 52 MB. Runs of 8 rows, four rows' loads in flight,
// took 31 us: a quarter of the blocks, too few warps per SM; results/h200/2026-12-02/v16/call2.)

int threads_for(int D) { return D <= 256 ? 64 : (D <= 1024 ? 128 : 256); }

template <class TX, class TW, class TY>
__global__ __launch_bounds__(kMaxThreads) void rmsnorm_fwd_kernel(TY* __restrict__ y, float* __restrict__ rstd,
                                                                  const TX* __restrict__ x, const TW* __restrict__ w,
                                                                  int D, float eps) {
  __shared__ float shared[32];
  const TX* xr = x + int64_t(blockIdx.x) * D;
  float ss = 0.f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float v = to_f32(xr[c]);
    ss += v * v;
  }
  ss = block_sum(ss, shared);
  const float r = 1.f / sqrtf(ss / float(D) + eps);
  TY* yr = y + int64_t(blockIdx.x) * D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) yr[c] = from_f32<TY>(to_f32(xr[c]) * r * to_f32(w[c]));
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// Stage 1: every block takes rows blockIdx.x * R .. + R - 1 and sums its share of dw in shared memory (each thread
// owns columns c = threadIdx.x + j * blockDim.x, so no two threads touch one entry), then writes it to
// partial[blockIdx.x, :].
template <class TDX, class TDY, class TX, class TW>
__global__ __launch_bounds__(kMaxThreads) void rmsnorm_bwd_kernel(TDX* __restrict__ dx, float* __restrict__ partial,
                                                                  const TDY* __restrict__ dy, const TX* __restrict__ x,
                                                                  const TW* __restrict__ w,
                                                                  const float* __restrict__ rstd, int64_t N, int D,
                                                                  int64_t R) {
  extern __shared__ float pr[];  // [D]: this block's dw partial
  __shared__ float shared[32];
  for (int c = threadIdx.x; c < D; c += blockDim.x) pr[c] = 0.f;
  const int64_t n0 = int64_t(blockIdx.x) * R, n1 = n0 + R < N ? n0 + R : N;
  for (int64_t n = n0; n < n1; ++n) {
    const TDY* dyr = dy + n * D;
    const TX* xr = x + n * D;
    float dot = 0.f;
    for (int c = threadIdx.x; c < D; c += blockDim.x) dot += to_f32(w[c]) * to_f32(dyr[c]) * to_f32(xr[c]);
    dot = block_sum(dot, shared);
    const float r = rstd[n];
    const float k = r * r * dot / float(D);
    TDX* dxr = dx + n * D;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
      const float g = to_f32(dyr[c]), xv = to_f32(xr[c]);
      dxr[c] = from_f32<TDX>(to_f32(dxr[c]) + r * (to_f32(w[c]) * g - xv * k));
      pr[c] += g * xv * r;
    }
  }
  float* out = partial + int64_t(blockIdx.x) * D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) out[c] = pr[c];
}

// Stage 2: dw[d] (+)= sum over blocks b = 0..G-1 of partial[b, d] (accumulate: add to dw, else overwrite it). A
// block takes 32 columns; its 32 warps each sum the rows b = warp, warp + 32, ... of those columns (coalesced
// 128-byte rows), then warp 0 adds the 32 results in warp order: a fixed order, so the sum is the same on every run.
// 32 warps (not 8): with d_model / 32 blocks only (24 for d_model 768, 80 for 2560) the sum is latency-bound, and
// four times the loads in flight shorten it; each warp's loop is unrolled 4 times for the same reason.
constexpr int kSumCols = 32, kSumWarps = 32;
template <class TW>
__global__ __launch_bounds__(kSumCols * kSumWarps) void rmsnorm_dw_sum_kernel(TW* __restrict__ dw,
                                                                              const float* __restrict__ partial,
                                                                              int G, int D, bool accumulate) {
  __shared__ float acc_w[kSumWarps][kSumCols];
  const int lane = threadIdx.x % kSumCols, warp = threadIdx.x / kSumCols;
  const int c = blockIdx.x * kSumCols + lane;
  float acc = 0.f;
  if (c < D) {
#pragma unroll 4  // four rows' loads in flight, the same order of adds: 9.2 -> 4.8 us at xl (v18/call2)
    for (int b = warp; b < G; b += kSumWarps) acc += partial[int64_t(b) * D + c];
  }
  acc_w[warp][lane] = acc;
  __syncthreads();
  if (warp == 0 && c < D) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kSumWarps; ++k) total += acc_w[k][lane];
    dw[c] = from_f32<TW>(accumulate ? to_f32(dw[c]) + total : total);
  }
}

// ---- bf16 vector kernels: 8 consecutive columns per thread through 16-byte accesses, the row held in registers
// (one read of x in the forward; in the backward each thread keeps its 8 columns' dw partials in registers, not
// shared memory). Used when x, y/dx, dy and w are all bf16, D % 8 == 0, D <= 8 * 1024 (backward: 8 * 640 = 5120)
// and pointers are 16-byte aligned (the bf16 model's case; the backward's scratch too); same formulas as above,
// per-thread partial sums then the same block tree.
constexpr int kVec = 8;
struct alignas(16) Bf16x8 {
  bf16 v[kVec];
};

__global__ __launch_bounds__(1024) void rmsnorm_fwd_vec_kernel(bf16* __restrict__ y, float* __restrict__ rstd,
                                                              const bf16* __restrict__ x, const bf16* __restrict__ w,
                                                              int D, float eps) {
  __shared__ float shared[32];
  const int c = threadIdx.x * kVec;
  const bool mine = c < D;
  Bf16x8 xv{}, wv{};
  float ss = 0.f;
  if (mine) {
    xv = *reinterpret_cast<const Bf16x8*>(x + int64_t(blockIdx.x) * D + c);
    wv = *reinterpret_cast<const Bf16x8*>(w + c);  // loaded with x, not after the block sum's barriers
#pragma unroll
    for (int k = 0; k < kVec; ++k) ss += to_f32(xv.v[k]) * to_f32(xv.v[k]);
  }
  ss = block_sum(ss, shared);
  const float r = 1.f / sqrtf(ss / float(D) + eps);
  if (mine) {
    Bf16x8 out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) out.v[k] = from_f32<bf16>(to_f32(xv.v[k]) * r * to_f32(wv.v[k]));
    *reinterpret_cast<Bf16x8*>(y + int64_t(blockIdx.x) * D + c) = out;
  }
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

// One row at a time: ~62 registers, so 3 blocks of xl's 320 threads fit an SM. At xl's shapes (ncu, with the float4
// partial stores below) two rows' loads in flight took 17.0 us (88 registers, 2 blocks an SM), one row 15.5; two rows
// with dy and x read again from L1 after the block sum took 16.7 (71 registers), or 15.5 with launch bounds (384, 3)
// for 56 registers (results/h200/2026-12-03/v18/call2, variants v1, v3, v2, v5).
constexpr int kBwdVecMaxThreads = 640;  // d_model <= 5120 (10B: 4608); at most 96 registers a thread (65536 / 640,
                                        // in the allocation's steps of 8)
__global__ __launch_bounds__(kBwdVecMaxThreads) void rmsnorm_bwd_vec_kernel(
    bf16* __restrict__ dx, float* __restrict__ partial, const bf16* __restrict__ dy, const bf16* __restrict__ x,
    const bf16* __restrict__ w, const float* __restrict__ rstd, int64_t N, int D, int64_t R) {
  __shared__ float shared[32];
  const int c = threadIdx.x * kVec;
  const bool mine = c < D;
  float wv[kVec], pr[kVec];
  Bf16x8 wl{};
  if (mine) wl = *reinterpret_cast<const Bf16x8*>(w + c);
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
    wv[k] = to_f32(wl.v[k]);
    pr[k] = 0.f;
  }
  const int64_t n0 = int64_t(blockIdx.x) * R, n1 = n0 + R < N ? n0 + R : N;
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t o = n * D + c;
    Bf16x8 dyv{}, xv{}, dxv{};
    if (mine) {  // dx is loaded with dy and x, before the block sum
      dyv = *reinterpret_cast<const Bf16x8*>(dy + o);
      xv = *reinterpret_cast<const Bf16x8*>(x + o);
      dxv = *reinterpret_cast<const Bf16x8*>(dx + o);
    }
    const float r = rstd[n];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < kVec; ++k) dot += wv[k] * to_f32(dyv.v[k]) * to_f32(xv.v[k]);
    dot = block_sum(dot, shared);
    if (!mine) continue;
    const float kk = r * r * dot / float(D);
    Bf16x8 out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      const float g = to_f32(dyv.v[k]), xk = to_f32(xv.v[k]);
      out.v[k] = from_f32<bf16>(to_f32(dxv.v[k]) + r * (wv[k] * g - xk * kk));
      pr[k] += g * xk * r;
    }
    *reinterpret_cast<Bf16x8*>(dx + o) = out;
  }
  static_assert(kVec == 8, "two float4 stores below");
  if (mine) {  // two 16-byte stores, not eight of 4 bytes strided by 32 (those wrote each L2 sector eight times: 25.9
               // -> 17.0 us at xl's shapes); partial is 16-byte aligned (the launcher checks) and D % 8 == 0
    float4* out = reinterpret_cast<float4*>(partial + int64_t(blockIdx.x) * D + c);
    out[0] = make_float4(pr[0], pr[1], pr[2], pr[3]);
    out[1] = make_float4(pr[4], pr[5], pr[6], pr[7]);
  }
}

bool vec_ok(int D, std::initializer_list<const void*> ptrs, int max_threads = 1024) {
  if (D % kVec != 0 || D > kVec * max_threads) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}
int vec_threads(int D) { return ceil_div(D / kVec, 32) * 32; }

/// dw (+)= the column sum of partial [G, D] (rmsnorm_dw_sum_kernel) in dw's dtype.
void dw_sum(void* dw, DType tdw, const float* partial, int G, int D, bool accumulate, cudaStream_t s) {
  dispatch_float(tdw, "rmsnorm_bwd dw", [&](auto aw) {
    using TW = typename decltype(aw)::type;
    rmsnorm_dw_sum_kernel<TW><<<ceil_div(D, kSumCols), kSumCols * kSumWarps, 0, s>>>(static_cast<TW*>(dw), partial,
                                                                                     G, D, accumulate);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void rmsnorm_fwd(void* y, DType ty, float* rstd, const void* x, DType tx, const void* w, DType tw, int64_t N, int D,
                 float eps, cudaStream_t s) {
  if (N <= 0) return;
  if (tx == DType::bf16 && ty == DType::bf16 && tw == DType::bf16 && vec_ok(D, {y, x, w})) {
    rmsnorm_fwd_vec_kernel<<<unsigned(N), vec_threads(D), 0, s>>>(static_cast<bf16*>(y), rstd,
                                                                   static_cast<const bf16*>(x),
                                                                   static_cast<const bf16*>(w), D, eps);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  dispatch_float(tx, "rmsnorm_fwd x", [&](auto ax) {
    dispatch_float(tw, "rmsnorm_fwd w", [&](auto aw) {
      dispatch_float(ty, "rmsnorm_fwd y", [&](auto ay) {
        using TX = typename decltype(ax)::type;
        using TW = typename decltype(aw)::type;
        using TY = typename decltype(ay)::type;
        rmsnorm_fwd_kernel<TX, TW, TY><<<unsigned(N), threads_for(D), 0, s>>>(
            static_cast<TY*>(y), rstd, static_cast<const TX*>(x), static_cast<const TW*>(w), D, eps);
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

size_t rmsnorm_bwd_scratch_bytes(int64_t N, int D) { return cuda_sizes::rmsnorm_bwd_scratch_bytes(N, D); }

void rmsnorm_bwd(void* dx, DType tdx, void* dw, DType tdw, const void* dy, DType tdy, const void* x, DType tx,
                 const void* w, DType tw, const float* rstd, int64_t N, int D, void* scratch, bool accumulate_dw,
                 cudaStream_t s) {
  if (N <= 0) {
    if (!accumulate_dw) CUDA_CHECK(cudaMemsetAsync(dw, 0, size_t(D) * dtype_size(tdw), s));
    return;
  }
  const int G = int(cuda_sizes::rmsnorm_bwd_blocks(N));
  const int64_t R = cuda_sizes::rmsnorm_bwd_rows(N);
  float* partial = static_cast<float*>(scratch);
  if (tdx == DType::bf16 && tdy == DType::bf16 && tx == DType::bf16 && tw == DType::bf16 &&
      vec_ok(D, {dx, dy, x, w, partial}, kBwdVecMaxThreads)) {  // partial: its float4 stores
    rmsnorm_bwd_vec_kernel<<<G, vec_threads(D), 0, s>>>(static_cast<bf16*>(dx), partial, static_cast<const bf16*>(dy),
                                                        static_cast<const bf16*>(x), static_cast<const bf16*>(w),
                                                        rstd, N, D, R);
    CUDA_CHECK(cudaGetLastError());
    dw_sum(dw, tdw, partial, G, D, accumulate_dw, s);
    return;
  }
  dispatch_float(tdx, "rmsnorm_bwd dx", [&](auto adx) {
    dispatch_float(tdy, "rmsnorm_bwd dy", [&](auto ady) {
      dispatch_float(tx, "rmsnorm_bwd x", [&](auto ax) {
        dispatch_float(tw, "rmsnorm_bwd w", [&](auto aw) {
          using TDX = typename decltype(adx)::type;
          using TDY = typename decltype(ady)::type;
          using TX = typename decltype(ax)::type;
          using TW = typename decltype(aw)::type;
          const size_t smem = size_t(D) * sizeof(float);
          TRAINER_CHECK(smem <= size_t(kMaxSmemBytes), "rmsnorm_bwd: d_model {} needs {} bytes of shared memory", D,
                        smem);
          set_smem(rmsnorm_bwd_kernel<TDX, TDY, TX, TW>, smem);
          rmsnorm_bwd_kernel<TDX, TDY, TX, TW><<<G, threads_for(D), smem, s>>>(
              static_cast<TDX*>(dx), partial, static_cast<const TDY*>(dy), static_cast<const TX*>(x),
              static_cast<const TW*>(w), rstd, N, D, R);
        });
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
  dw_sum(dw, tdw, partial, G, D, accumulate_dw, s);
}

}  // namespace trainer::kernels
