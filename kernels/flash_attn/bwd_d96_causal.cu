// FlashAttention-2 backward, d_head 96, causal = true, bf16 and fp32 (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<96, true, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_launch<96, true, true>(const FlashBwdParams&, cudaStream_t);
}  // namespace trainer::flash
