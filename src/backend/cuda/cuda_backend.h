// The CUDA backend: kernels/ for the ops, cuBLASLt for the matrix products, one non-blocking compute stream.
#pragma once
#include <memory>

#include "backend/backend.h"

namespace trainer {

/// A CudaBackend on GPU `device_index` (made current on this thread). Creates the compute stream, the cuBLASLt handle
/// and a 32 MiB cuBLASLt workspace (Category::workspace). Throws ConfigError for a device index that does not exist.
std::unique_ptr<Backend> make_cuda_backend(int device_index, const BackendOptions& opts);

}  // namespace trainer
