// FlashAttention-2 backward, bf16, d_head 32, causal = true (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<32, true>(const FlashBwdParams&, cudaStream_t);
}  // namespace trainer::flash
