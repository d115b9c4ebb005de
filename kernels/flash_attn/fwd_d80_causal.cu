// FlashAttention-2 forward, bf16, d_head 80, causal = true (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<80, true>(const FlashParams&, cudaStream_t);
}  // namespace trainer::flash
