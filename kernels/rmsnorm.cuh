// RMSNorm launchers (forward and backward). x, y, dx, dy: [N, D] row-major, f32 or bf16; w: [D] f32 or bf16;
// rstd: [N] f32; dw: [D] f32 or bf16.
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// y = w * x * rstd, rstd[n] = 1/sqrt(mean_d(x[n,d]^2) + eps), all in fp32. x and y may have different dtypes.
void rmsnorm_fwd(void* y, DType ty, float* rstd, const void* x, DType tx, const void* w, DType tw, int64_t N, int D,
                 float eps, cudaStream_t s);

/// Bytes of scratch rmsnorm_bwd needs for N rows of width D (per-block partial sums of dw).
size_t rmsnorm_bwd_scratch_bytes(int64_t N, int D);

/// dx += rstd * (w*dy - x * rstd^2 * mean_d(w*dy*x)) and dw += sum_n dy*x*rstd (dw = ... when !accumulate_dw). dw is reduced in a
/// fixed order (per-block partials in `scratch`, then a column sum in fp32), so results are deterministic; a bf16 dw
/// is rounded once per element. dx may be f32 or bf16 and has its own dtype; dy, x and dw likewise.
void rmsnorm_bwd(void* dx, DType tdx, void* dw, DType tdw, const void* dy, DType tdy, const void* x, DType tx,
                 const void* w, DType tw, const float* rstd, int64_t N, int D, void* scratch, bool accumulate_dw,
                 cudaStream_t s);

}  // namespace trainer::kernels
