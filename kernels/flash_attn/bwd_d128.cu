// FlashAttention-2 backward, bf16, d_head 128, causal = false (see launch.cuh).
#include "flash_attn/launch.cuh"

namespace trainer::flash {
template void bwd_launch<128, false>(const FlashBwdParams&, cudaStream_t);
template int bwd_dkdv_chunk<128>(int, int64_t, bool);
}  // namespace trainer::flash
