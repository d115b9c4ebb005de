// C entry points for the GPU check and benchmark of the fused weight gradient + AdamW kernel
// (kernels/dw_adamw/, launch/dw_adamw_bench/check.py loads this through ctypes): the fused kernel, and the path it
// would replace, as the trainer runs it today: the cuBLASLt product into an fp32 gradient (CublasLtMatmul, autotuned
// or the heuristic's choice) followed by kernels::adamw. Built by launch/dw_adamw_bench/build.sh; needs no MPI,
// OpenBLAS or JSON library.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "adamw.cuh"
#include "backend/cuda/matmul.h"
#include "dw_adamw/dw_adamw.h"

#include "../bench_fatal.h"  // CUDA_CHECK's fatal path

using namespace trainer;

namespace {
kernels::AdamWStep step(float beta1, float beta2, float eps, float decay, float step_size, float grad_scale) {
  kernels::AdamWStep a{};
  a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.decay = decay, a.step_size = step_size, a.grad_scale = grad_scale;
  a.one_minus_beta1 = float(1.0 - double(beta1)), a.one_minus_beta2 = float(1.0 - double(beta2));  // (the floats given)
  return a;
}
}  // namespace

extern "C" {

/// The fused kernel (kernels::dw_adamw) on `stream` (null: the default stream): dY [K, M] (row stride ld_dy) and
/// X [K, N] (ld_x) bf16; p, m, v fp32 [M, N] (row stride N), p_work bf16 [M, N] or null, grad fp32 [M, N] or null,
/// grad_in fp32 [M, N] or null (added to the product; may be grad); sumsq (fp64 device scalar) receives the sum of g²
/// when given, partials: 1024 doubles of scratch. update 0: grad only. Returns 0, or 1 when the problem is not
/// supported (the reason on stderr).
int dwa_fused(const void* dy, int ld_dy, const void* x, int ld_x, int M, int N, int K, float* p, float* m, float* v,
              void* p_work, float* grad, const float* grad_in, int update, double* partials, double* sumsq,
              float beta1, float beta2, float eps, float decay, float step_size, float grad_scale, void* stream) {
  kernels::DwAdamWArgs a;
  a.dy = static_cast<const bf16*>(dy), a.ld_dy = ld_dy, a.x = static_cast<const bf16*>(x), a.ld_x = ld_x;
  a.M = M, a.N = N, a.K = K, a.p = p, a.m = m, a.v = v, a.p_work = static_cast<bf16*>(p_work), a.ld = N;
  a.grad = grad, a.grad_in = grad_in, a.update = update != 0, a.partials = partials, a.sumsq_out = sumsq;
  a.a = step(beta1, beta2, eps, decay, step_size, grad_scale);
  const char* why = nullptr;
  if (!kernels::dw_adamw_supported(a, &why)) {
    std::fprintf(stderr, "dwa_fused: %s\n", why);
    return 1;
  }
  kernels::dw_adamw(a, static_cast<cudaStream_t>(stream));
  return 0;
}

/// Today's path on `stream`: g = dYᵀ X by cuBLASLt (bf16 inputs, fp32 output, beta 0; one CublasLtMatmul per
/// autotune setting, kept across calls, so a shape is tuned on its first call), then kernels::adamw over the M N
/// elements with g's sum of squares into sumsq (fp64 device scalar; partials: kReduceMaxBlocks doubles). g fp32
/// [M, N] is the caller's. update 0: the product only.
int dwa_unfused(const void* dy, int ld_dy, const void* x, int ld_x, int M, int N, int K, float* p, float* m, float* v,
                void* p_work, float* g, int update, double* partials, double* sumsq, float beta1, float beta2,
                float eps, float decay, float step_size, float grad_scale, int autotune, void* stream) {
  static void* workspace = nullptr;
  static constexpr size_t kWorkspace = size_t(32) << 20;  // the backend's cuBLASLt workspace
  static std::unique_ptr<CublasLtMatmul> mm[2];
  if (!workspace) CUDA_CHECK(cudaMalloc(&workspace, kWorkspace));
  auto& gemm = mm[autotune ? 1 : 0];
  if (!gemm) gemm = std::make_unique<CublasLtMatmul>(workspace, kWorkspace, autotune != 0);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  GemmShape sh;
  sh.M = M, sh.N = N, sh.K = K, sh.trans_a = true, sh.trans_b = false, sh.ab = DType::bf16, sh.c = DType::f32;
  sh.lda = ld_dy, sh.ldb = ld_x, sh.ldc = N;
  gemm->gemm(sh, g, dy, x, 1.f, 0.f, s);
  if (update)
    kernels::adamw(p, g, m, v, p_work, DType::bf16, int64_t(M) * N, step(beta1, beta2, eps, decay, step_size, grad_scale),
                   partials, sumsq, s);
  return 0;
}

}  // extern "C"
