// FlashAttention-2 forward, bf16, d_head 128, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void fwd_launch<128, false>(const FlashParams&, cudaStream_t);
template int fwd_splits<128>(int, int64_t);
}  // namespace trainer::flash
