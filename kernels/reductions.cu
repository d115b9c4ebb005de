// Sum and sum of squares of a flat array, in fp64, deterministic (fixed two-stage tree):
//   stage 1: block b (of G = min(1024, ceil(n / 2048)) blocks of 256 threads) sums x[i]^(1|2) over
//            i = b*256 + tid + k*G*256 in fp64, then a fixed-shape block tree gives partials[b];
//   stage 2: one block of 1024 threads sums partials[0..G-1] with the same tree into out[0].
// x f32 or bf16 [n]; out, partials fp64 on the device. fp64 accumulation makes the result's rounding error about
// n * 2^-53 relative, far below fp32's; the fp64 adds are not the bottleneck (memory is).
// Pattern: the CUB/thrust two-pass reduce, with a grid that depends on n only (llm.c `global_norm_squared`).
#include "common.cuh"
#include "reductions.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

template <class T, bool kSquare>
__global__ __launch_bounds__(kThreads) void reduce_stage1_kernel(double* __restrict__ partials,
                                                                 const T* __restrict__ x, int64_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(to_f32(x[i]));
    acc += kSquare ? v * v : v;
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ __launch_bounds__(kReduceMaxBlocks) void reduce_stage2_kernel(double* __restrict__ out,
                                                                         const double* __restrict__ partials, int G) {
  __shared__ double shared[32];
  double v = threadIdx.x < G ? partials[threadIdx.x] : 0.0;
  v = block_sum(v, shared);
  if (threadIdx.x == 0) out[0] = v;
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void reduce_sum(double* out, const void* x, DType t, int64_t n, bool square, double* partials, cudaStream_t s) {
  const int64_t want = ceil_div<int64_t>(n, 8 * kThreads);  // at least 8 elements per thread before the tree
  const int G = int(want < 1 ? 1 : (want > kReduceMaxBlocks ? kReduceMaxBlocks : want));
  if (n > 0) {
    dispatch_float(t, "reduce_sum", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if (square)
        reduce_stage1_kernel<T, true><<<G, kThreads, 0, s>>>(partials, static_cast<const T*>(x), n);
      else
        reduce_stage1_kernel<T, false><<<G, kThreads, 0, s>>>(partials, static_cast<const T*>(x), n);
    });
    CUDA_CHECK(cudaGetLastError());
  }
  reduce_partials(out, partials, n > 0 ? G : 0, s);
}

namespace {
__global__ void clip_factor_kernel(float* factor, const double* sumsq, double max_norm) {
  const double f = max_norm / (__dsqrt_rn(*sumsq) + 1e-6);
  *factor = float(f < 1.0 ? f : 1.0);
}
}  // namespace

void clip_factor(float* factor, const double* sumsq, double max_norm, cudaStream_t s) {
  clip_factor_kernel<<<1, 1, 0, s>>>(factor, sumsq, max_norm);
  CUDA_CHECK(cudaGetLastError());
}

void reduce_partials(double* out, const double* partials, int count, cudaStream_t s) {
  TRAINER_CHECK(count >= 0 && count <= kReduceMaxBlocks, "reduce_partials: {} partials, at most {}", count,
                kReduceMaxBlocks);
  reduce_stage2_kernel<<<1, kReduceMaxBlocks, 0, s>>>(out, partials, count);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
