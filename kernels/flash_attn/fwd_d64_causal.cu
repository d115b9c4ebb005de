// FlashAttention-2 forward, bf16, d_head 64, causal = true (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<64, true>(const FlashParams&, cudaStream_t);
}  // namespace trainer::flash
