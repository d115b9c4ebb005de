// Declarations of the per-(d_head, causal) launchers; their definitions are in launch.cuh (bf16) and f32.cu (fp32),
// explicitly instantiated in fwd_d*.cu / bwd_d*.cu. Host code includes this header only.
#pragma once
#include <cuda_runtime_api.h>

#include "flash_attn/params.h"

namespace trainer::flash {

/// bf16 forward / backward for one head dimension (16, 32, 64, 80, 128) and mask.
template <int kD, bool kCausal>
void fwd_launch(const FlashParams& p, cudaStream_t s);
template <int kD, bool kCausal>
void bwd_launch(const FlashBwdParams& p, cudaStream_t s);

/// Backward preprocessing (any dtype): D = rowsum(dO o O) into p.dsum, and dq_accum = 0 when zero_accum.
void launch_bwd_preprocess(const FlashBwdParams& p, bool zero_accum, cudaStream_t s);
/// dQ = scale * dq_accum into the dq view (bf16 atomic mode).
void launch_bwd_convert_dq(const FlashBwdParams& p, cudaStream_t s);

/// fp32 forward / backward (FMA tiles; any of the same head dimensions; p.causal at run time; always deterministic).
void fwd_f32_launch(const FlashParams& p, cudaStream_t s);
void bwd_f32_launch(const FlashBwdParams& p, cudaStream_t s);

}  // namespace trainer::flash
