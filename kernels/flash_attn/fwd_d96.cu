// FlashAttention-2 forward, d_head 96, causal = false, bf16 and fp32 (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<96, false, false>(const FlashParams&, cudaStream_t);
template void fwd_launch<96, false, true>(const FlashParams&, cudaStream_t);
template int fwd_splits<96, false>(int, int64_t);
template int fwd_splits<96, true>(int, int64_t);
}  // namespace trainer::flash
