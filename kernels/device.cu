// device.h: the current device's SM count, cached per device.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <atomic>

#include "device.h"

namespace trainer {

int device_sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> sms[kMaxDevices] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  int n = dev < kMaxDevices ? sms[dev].load(std::memory_order_relaxed) : 0;
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    if (dev < kMaxDevices) sms[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace trainer
