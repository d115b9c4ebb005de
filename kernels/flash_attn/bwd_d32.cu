// FlashAttention-2 backward, bf16, d_head 32, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<32, false>(const FlashBwdParams&, cudaStream_t);
template int bwd_dkdv_chunk<32>(int, int64_t, bool);
}  // namespace trainer::flash
