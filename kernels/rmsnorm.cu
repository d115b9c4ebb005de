// RMSNorm, forward and backward (Zhang & Sennrich 2019, arXiv:1910.07467; DESIGN.md "RMSNorm ... computed in fp32").
//   forward:  r[n] = 1 / sqrt(mean_d x[n,d]^2 + eps);   y[n,d] = (x[n,d] * r[n]) * w[d]
//   backward: with c[n] = mean_d w[d] dy[n,d] x[n,d],
//             dx[n,d] += r[n] (w[d] dy[n,d] - x[n,d] r[n]^2 c[n])        (accumulates into the residual gradient)
//             dw[d]   += sum_n dy[n,d] x[n,d] r[n]                      (fixed-order two-stage sum: deterministic)
// Shapes: x, y, dy, dx [N, D] row-major (f32 or bf16, each its own dtype); w [D] f32 or bf16; r [N] f32; dw [D] f32.
// One block per row (forward); the backward's blocks each take rows b, b + G, b + 2G, ... and keep their own
// partial dw row in shared memory (d_model floats, so d_model <= 57856). Pattern: llm.c `llmc/layernorm.cuh`
// (layernorm_backward_kernel10 keeps per-block dweight partials and sums them in a second step); ggml
// `src/ggml-cuda/norm.cu` (rms_norm_f32).
#include "common.cuh"
#include "rmsnorm.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kMaxThreads = 256;
constexpr int kMaxSmemBytes = 226 * 1024;  // Hopper's opt-in limit (227 KiB) less room for static shared
constexpr int kBwdBlocks = 1024;  // G: a fixed count (not the SM count) so the dw sum order never changes;
                                   // 1024 blocks keep ~8 blocks of 256 threads on each of the 132 SMs

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

// Stage 1: every block takes rows blockIdx.x + k * gridDim.x and sums its share of dw in shared memory (each thread
// owns columns c = threadIdx.x + j * blockDim.x, so no two threads touch one entry), then writes it to
// partial[blockIdx.x, :].
template <class TDX, class TDY, class TX, class TW>
__global__ __launch_bounds__(kMaxThreads) void rmsnorm_bwd_kernel(TDX* __restrict__ dx, float* __restrict__ partial,
                                                                  const TDY* __restrict__ dy, const TX* __restrict__ x,
                                                                  const TW* __restrict__ w,
                                                                  const float* __restrict__ rstd, int64_t N, int D) {
  extern __shared__ float pr[];  // [D]: this block's dw partial
  __shared__ float shared[32];
  for (int c = threadIdx.x; c < D; c += blockDim.x) pr[c] = 0.f;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
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

// Stage 2: dw[d] += sum over blocks b = 0..G-1 of partial[b, d], in that order.
__global__ __launch_bounds__(kMaxThreads) void rmsnorm_dw_sum_kernel(float* __restrict__ dw,
                                                                     const float* __restrict__ partial, int G, int D) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= D) return;
  float acc = 0.f;
  for (int b = 0; b < G; ++b) acc += partial[int64_t(b) * D + c];
  dw[c] += acc;
}

int bwd_blocks(int64_t N) { return int(N < kBwdBlocks ? N : kBwdBlocks); }

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void rmsnorm_fwd(void* y, DType ty, float* rstd, const void* x, DType tx, const void* w, DType tw, int64_t N, int D,
                 float eps, cudaStream_t s) {
  if (N <= 0) return;
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

size_t rmsnorm_bwd_scratch_bytes(int64_t N, int D) { return size_t(bwd_blocks(N)) * size_t(D) * sizeof(float); }

void rmsnorm_bwd(void* dx, DType tdx, float* dw, const void* dy, DType tdy, const void* x, DType tx, const void* w,
                 DType tw, const float* rstd, int64_t N, int D, void* scratch, cudaStream_t s) {
  if (N <= 0) return;
  const int G = bwd_blocks(N);
  float* partial = static_cast<float*>(scratch);
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
          if (smem > 48 * 1024)  // above 48 KiB a kernel must opt in
            CUDA_CHECK(cudaFuncSetAttribute(rmsnorm_bwd_kernel<TDX, TDY, TX, TW>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          rmsnorm_bwd_kernel<TDX, TDY, TX, TW><<<G, threads_for(D), smem, s>>>(
              static_cast<TDX*>(dx), partial, static_cast<const TDY*>(dy), static_cast<const TX*>(x),
              static_cast<const TW*>(w), rstd, N, D);
        });
      });
    });
  });
  CUDA_CHECK(cudaGetLastError());
  rmsnorm_dw_sum_kernel<<<ceil_div(D, 128), 128, 0, s>>>(dw, partial, G, D);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
