// Fused softmax + cross-entropy loss + dlogits launcher. logits, dlogits [N, V] (f32 or bf16), targets i32 [N],
// losses f32 [N].
#pragma once
#include "common.cuh"  // first: it sets fmt up for nvcc (see there)

#include <cstdint>

namespace trainer::kernels {

/// losses[n] = logsumexp(logits[n]) - logits[n, targets[n]]; if dlogits is non-null (it may equal logits):
/// dlogits[n, v] = dscale * (softmax(logits[n])[v] - [v == targets[n]]). A target outside [0, V) gives a NaN loss
/// (and a NaN dlogits row), so a bad token cannot pass silently.
void cross_entropy(float* losses, void* dlogits, DType tdl, const void* logits, DType tl, const int32_t* targets,
                   int64_t N, int64_t V, float dscale, cudaStream_t s);

}  // namespace trainer::kernels
