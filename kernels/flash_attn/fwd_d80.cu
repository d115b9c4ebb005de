// FlashAttention-2 forward, bf16, d_head 80, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<80, false>(const FlashParams&, cudaStream_t);
template int fwd_splits<80>(int, int64_t);
}  // namespace trainer::flash
