// FlashAttention-2 backward, d_head 96, causal = false, bf16 and fp32 (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<96, false, false>(const FlashBwdParams&, cudaStream_t);
template void bwd_launch<96, false, true>(const FlashBwdParams&, cudaStream_t);
template int bwd_dkdv_chunk<96, false>(int, int64_t, bool);
template int bwd_dkdv_chunk<96, true>(int, int64_t, bool);
}  // namespace trainer::flash
