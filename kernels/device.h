// Host-side facts about the current CUDA device that the kernels' launchers size their grids by. Plain C++.
#pragma once

namespace trainer {

/// Streaming multiprocessors of the current device (cudaDevAttrMultiProcessorCount, cached per device; thread-safe).
/// CUDA errors abort (CUDA_CHECK).
int device_sm_count();

}  // namespace trainer
