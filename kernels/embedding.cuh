// Token embedding launchers: gather rows of a table (forward) and scatter-add gradients into it (backward).
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstddef>
#include <cstdint>

namespace trainer::kernels {

/// out[n, :] = table[tokens[n], :]. table [V, D] and out [N, D] f32 or bf16 (each its own dtype). A token outside
/// [0, V) gives a NaN row, so it cannot pass silently.
void embedding_fwd(void* out, DType tout, const int32_t* tokens, const void* table, DType ttable, int64_t N, int64_t V,
                   int D, cudaStream_t s);

/// Bytes of scratch embedding_bwd needs for N tokens (sort keys, values and CUB's temp space; V is unused for now).
size_t embedding_bwd_scratch_bytes(int64_t N, int64_t V);

/// dtable[tokens[n], :] += dout[n, :] for every n; dtable f32 or bf16 [V, D], dout f32 or bf16 [N, D]. Deterministic:
/// the tokens are sorted stably (CUB radix sort), and each distinct token's rows are summed in fp32 in increasing n
/// by one block, which then adds the sum to dtable's row once (one rounding per element for a bf16 dtable; no fp32
/// copy of the table). Tokens outside [0, V) are skipped.
void embedding_bwd(void* dtable, DType tdtable, const int32_t* tokens, const void* dout, DType tdout, int64_t N,
                   int64_t V, int D, void* scratch, size_t scratch_bytes, cudaStream_t s);

}  // namespace trainer::kernels
