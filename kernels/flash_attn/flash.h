// FlashAttention-2 on the CUDA backend: the host entry points (validate, then dispatch on dtype, head dimension and
// mask, then launch). Kernels: fwd_kernel.cuh, bwd_kernel.cuh (tensor cores, mma.sync: bf16, and fp32 as 3xTF32),
// fwd_sm90.cuh, bwd_sm90.cuh (bf16 on Hopper, wgmma).
// Formulas: Dao 2023, "FlashAttention-2", arXiv:2307.08691, Algorithms 1 (forward) and 2 (backward).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"
#include "core/tensor.h"
#include "flash_attn/params.h"

namespace trainer::flash {

/// Head dimensions with a kernel (bf16 and fp32): 16, 32, 64, 80, 96, 128.
bool supports_head_dim(int d_head);

/// True when attention_fwd (backward = false) or attention_bwd (backward = true; either mode) runs the
/// Hopper kernels (sm_90a, wgmma: fwd_sm90.cuh, bwd_sm90.cuh) for this problem: bf16, d_head 64, 80, 96 or 128, a
/// build for sm_90a running on a compute capability 9.0 device, and for the forward at least one query tile for every
/// third SM (tiles of 192 rows at d 64 / 80 / 96, 128 at d 128; the backward splits its query loop instead).
/// Otherwise the mma.sync FlashAttention-2 kernels.
bool uses_sm90_kernels(const AttnShape& s, DType dtype, bool backward);
/// True when this build has the Hopper kernels (sm_90a) and the current device runs them (compute capability 9.0).
bool sm90_kernels_available();

/// Forward on raw parameters: O [B, T, H, d] view and lse [B, H, T] (natural log) from the q, k, v views.
/// Checks (RuntimeError via TRAINER_CHECK): supported d_head; non-null pointers; q, k, v rows 16-byte aligned (pointer
/// and every stride a multiple of 16 bytes); seq and batch x heads within the grid limits; output pairs aligned;
/// softmax_scale > 0; f32 inputs need f32 output.
void run_fwd(const FlashParams& p, cudaStream_t s);

/// Backward on raw parameters: dq, dk, dv (overwritten) from dout, q, k, v, o and lse. p.dsum must hold B*H*T
/// floats; p.dq_accum B*H*T*d floats, 16-byte aligned, in the non-deterministic mode and on the Hopper backward (both
/// from bwd_workspace_bytes; bind_bwd_workspace sets them). Same checks as run_fwd.
void run_bwd(const FlashBwdParams& p, cudaStream_t s);

/// Bytes of workspace attention_bwd needs: D [B, H, T] f32, plus dQ accumulators [B, H, T, d] f32 and their tile
/// words [B, H, ceil(T / 64)] u32 in the (default) non-deterministic mode and wherever the Hopper backward runs (its
/// deterministic mode adds dQ in key-tile order), plus dK and dV accumulators (2 x [B, H, T, d] f32) in the
/// non-deterministic mode when the problem has so few key tiles that the dK/dV pass splits its query loop. 256-byte
/// aligned parts.
size_t bwd_workspace_bytes(const AttnShape& s, DType dtype, bool deterministic);

/// Bytes of workspace attention_fwd needs: 0, or for problems with few query tiles (split keys) the partial
/// results of each key chunk: S x [B, H, T, d] + S x [B, H, T] f32, 256-byte aligned parts.
size_t fwd_workspace_bytes(const AttnShape& s, DType dtype);

/// Point p's workspace pointers into `workspace` (at least fwd_workspace_bytes / bwd_workspace_bytes bytes for the
/// same arguments, 256-byte aligned): the forward's split partials (o_accum, lse_accum; none when 0 bytes are
/// needed), the backward's dsum, dq_accum, dkv_accum and dq_tile_state. RuntimeError when the workspace is missing
/// or too small.
void bind_fwd_workspace(FlashParams& p, const AttnShape& s, DType dtype, void* workspace, size_t bytes);
void bind_bwd_workspace(FlashBwdParams& p, const AttnShape& s, DType dtype, bool deterministic, void* workspace,
                        size_t bytes);

/// out [B*T, D] (qkv's dtype or f32) and lse [B, H, T] f32 from qkv [B*T, 3D] (f32 or bf16) with the Backend's
/// layout (backend.h). `workspace` holds at least fwd_workspace_bytes(s, qkv.dtype) bytes of device memory (may be
/// null when that is 0). Enqueued on `st`.
void attention_fwd(const AttnShape& s, Tensor out, Tensor lse, const Tensor& qkv, void* workspace,
                   size_t workspace_bytes, cudaStream_t st);

/// dqkv [B*T, 3D] (qkv's dtype or f32; overwritten) from dout [B*T, D] (qkv's dtype), qkv, out and lse of the
/// forward. `workspace` holds at least bwd_workspace_bytes(s, qkv.dtype, deterministic) bytes of device memory.
/// deterministic: bitwise reproducible; the Hopper backward adds each dQ tile's contributions in key-tile order
/// (bwd_sm90.cuh), the mma.sync kernels take dQ by a separate pass, instead of fp32 atomic adds in any order.
void attention_bwd(const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                   const Tensor& lse, void* workspace, size_t workspace_bytes, bool deterministic, cudaStream_t st);

}  // namespace trainer::flash
