// FlashAttention-2 backward, bf16, d_head 16, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<16, false>(const FlashBwdParams&, cudaStream_t);
template int bwd_dkdv_chunk<16>(int, int64_t, bool);
}  // namespace trainer::flash
