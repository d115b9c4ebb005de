// FlashAttention-2 forward, d_head 96, causal = true, bf16 and fp32 (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<96, true, false>(const FlashParams&, cudaStream_t);
template void fwd_launch<96, true, true>(const FlashParams&, cudaStream_t);
}  // namespace trainer::flash
