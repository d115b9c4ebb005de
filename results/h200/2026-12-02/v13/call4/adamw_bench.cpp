// Exploration (not committed): AdamW kernel variants against a device-to-device copy, on the H200.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include "adamw.cuh"
using namespace trainer;
int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? atoll(argv[1]) : 104857600;
  float *p, *g, *m, *v; void* w; void *a, *b;
  cudaMalloc(&p, n * 4); cudaMalloc(&g, n * 4); cudaMalloc(&m, n * 4); cudaMalloc(&v, n * 4); cudaMalloc(&w, n * 2);
  cudaMemset(p, 0, n * 4); cudaMemset(g, 0, n * 4); cudaMemset(m, 0, n * 4); cudaMemset(v, 0, n * 4);
  const size_t cb = size_t(n) * 15;  // a copy moving 30 bytes per element (read 15, write 15)
  cudaMalloc(&a, cb); cudaMalloc(&b, cb); cudaMemset(a, 0, cb);
  kernels::AdamWStep st{0.9f, 0.999f, 1e-8f, 1e-5f, 1e-3f, 1.f};
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  auto time = [&](auto f) {
    std::vector<float> t;
    for (int r = 0; r < 25; ++r) { cudaEventRecord(e0); f(); cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); if (r >= 5) t.push_back(ms); }
    std::sort(t.begin(), t.end()); return t[t.size() / 2];
  };
  const float tc = time([&] { cudaMemcpyAsync(b, a, cb, cudaMemcpyDeviceToDevice); });
  double* part; cudaMalloc(&part, 1025 * 8);
  const bool sq = getenv("SUMSQ") != nullptr;
  const float ta = time([&] { kernels::adamw(p, g, m, v, w, DType::bf16, n, st, sq ? part : nullptr, sq ? part + 1024 : nullptr, 0); });
  printf("sumsq %d n %lld variant %s gdiv %s: copy %.3f ms (%.2f TB/s)  adamw %.3f ms (%.2f TB/s)  ratio %.3f\n", int(sq), (long long)n,
         getenv("TRAINER_X_ADAMW") ? getenv("TRAINER_X_ADAMW") : "0", getenv("TRAINER_X_GDIV") ? getenv("TRAINER_X_GDIV") : "1",
         tc, 2.0 * cb / tc / 1e9, ta, 30.0 * n / ta / 1e9, ta / tc);
  return 0;
}
