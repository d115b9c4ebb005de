// FlashAttention-2 forward, bf16, d_head 64, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<64, false>(const FlashParams&, cudaStream_t);
template int fwd_splits<64>(int, int64_t);
}  // namespace trainer::flash
