// Small standalone run of the FlashAttention kernels through the C entry points of capi.cu and sm90_capi.cu, for
// compute-sanitizer (racecheck, memcheck): ragged lengths, causal and not, bf16 (atomic and deterministic dQ) and
// fp32, and the Hopper (wgmma) kernels' production configurations called directly at small shapes. Exits 1 if an
// output holds a NaN (outputs are NaN-poisoned first) or a call fails.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

extern "C" int fa_fwd(int, const void*, void*, float*, int, int, int, int, int, int, int, float, void*);
extern "C" size_t fa_bwd_ws(int, int, int, int, int, int);
extern "C" int fa_bwd(int, void*, int, const void*, const void*, const void*, int, const float*, void*, int, int,
                      int, int, int, int, float, void*);

extern "C" int fa_fwd_sm90(int, const void*, void*, float*, int, int, int, int, int, int, float, void*);
extern "C" int fa_bwd_sm90(int, void*, const void*, const void*, const void*, const float*, float*, int, int, int, int,
                           int, float, void*);

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 1;                                                                        \
    }                                                                                  \
  } while (0)

/// sm90: variant / fwd_variant are fa_bwd_sm90 / fa_fwd_sm90 variants (bf16 only).
static int run_case(int B, int T, int H, int d, bool causal, bool bf16, int variant, int fwd_variant = 0,
                    bool sm90 = false) {
  const size_t D = size_t(H) * d, N = size_t(B) * T, es = bf16 ? 2 : 4;
  std::mt19937 rng(1234 + T + d);
  std::normal_distribution<float> nd;
  auto make = [&](size_t n) {
    std::vector<unsigned char> h(n * es);
    for (size_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      if (bf16) {
        __nv_bfloat16 b = __float2bfloat16(x);
        std::memcpy(&h[i * 2], &b, 2);
      } else {
        std::memcpy(&h[i * 4], &x, 4);
      }
    }
    return h;
  };
  auto hq = make(N * 3 * D), hdo = make(N * D);
  void *qkv, *out, *dout, *dqkv, *ws;
  float* lse;
  const size_t wsb = sm90 ? size_t(B) * H * T * (d + 1) * 4 : fa_bwd_ws(B, T, H, d, bf16, variant == 1);
  CK(cudaMalloc(&qkv, hq.size()));
  CK(cudaMalloc(&dout, hdo.size()));
  CK(cudaMalloc(&out, N * D * es));
  CK(cudaMalloc(&dqkv, N * 3 * D * es));
  CK(cudaMalloc(&lse, size_t(B) * H * T * 4));
  CK(cudaMalloc(&ws, wsb));
  CK(cudaMemcpy(qkv, hq.data(), hq.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dout, hdo.data(), hdo.size(), cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0xff, N * D * es));  // NaN in both dtypes
  CK(cudaMemset(dqkv, 0xff, N * 3 * D * es));
  CK(cudaMemset(lse, 0xff, size_t(B) * H * T * 4));
  const float scale = 1.f / std::sqrt(float(d));
  int rc = sm90 ? fa_fwd_sm90(fwd_variant, qkv, out, lse, B, T, H, d, causal, 0, scale, nullptr)
                : fa_fwd(fwd_variant, qkv, out, lse, B, T, H, d, causal, bf16, !bf16, scale, nullptr);
  if (rc == 0 && sm90)
    rc = fa_bwd_sm90(variant, dqkv, dout, qkv, out, lse, static_cast<float*>(ws), B, T, H, d, causal, scale, nullptr);
  else if (rc == 0)
    rc = fa_bwd(variant, dqkv, !bf16, dout, qkv, out, !bf16, lse, ws, B, T, H, d, causal, bf16, scale, nullptr);
  CK(cudaDeviceSynchronize());
  auto nan_count = [&](void* p, size_t n) {
    std::vector<unsigned char> h(n * es);
    cudaMemcpy(h.data(), p, n * es, cudaMemcpyDeviceToHost);
    size_t c = 0;
    for (size_t i = 0; i < n; ++i) {
      float x;
      if (bf16) {
        __nv_bfloat16 b;
        std::memcpy(&b, &h[i * 2], 2);
        x = __bfloat162float(b);
      } else {
        std::memcpy(&x, &h[i * 4], 4);
      }
      c += std::isnan(x) ? 1 : 0;
    }
    return c;
  };
  const size_t no = nan_count(out, N * D), ng = nan_count(dqkv, N * 3 * D);
  std::printf("smoke%s B=%d T=%d H=%d d=%d causal=%d %s variant=%d/%d: rc=%d nan(out)=%zu nan(dqkv)=%zu\n",
              sm90 ? " sm90" : "", B, T, H, d,
              int(causal), bf16 ? "bf16" : "f32", fwd_variant, variant, rc, no, ng);
  cudaFree(qkv), cudaFree(out), cudaFree(dout), cudaFree(dqkv), cudaFree(lse), cudaFree(ws);
  return rc != 0 || no || ng ? 1 : 0;
}

int main() {
  int bad = 0;
  bad += run_case(1, 100, 2, 64, true, true, 0);
  bad += run_case(1, 100, 2, 64, false, true, 1);
  bad += run_case(2, 77, 1, 128, true, true, 0);
  bad += run_case(1, 150, 1, 16, true, true, 1);
  bad += run_case(1, 100, 1, 80, true, true, 0);
  bad += run_case(1, 70, 2, 32, true, false, 0);
  bad += run_case(1, 70, 1, 128, false, false, 0);
  bad += run_case(1, 100, 2, 64, true, true, 7, 7);    // two m16 tiles per warp (capi.cu variants)
  bad += run_case(1, 100, 1, 128, true, true, 0, 10);
  bad += run_case(1, 300, 1, 128, true, true, 0, 31);  // d 128 forward with 256 x 64 tiles (production, many CTAs)
  // production dispatch at one head, T 600: on Hopper the wgmma backward with its split query loop (dkdv_chunk)
  bad += run_case(1, 600, 1, 64, true, true, 0);
  bad += run_case(1, 600, 1, 128, false, true, 0);
  // Hopper kernels (production tiles: sm90.cu Sm90Config) called directly, ragged lengths
  bad += run_case(1, 300, 2, 64, true, true, 7, 0, true);
  bad += run_case(1, 201, 1, 64, false, true, 7, 0, true);
  bad += run_case(1, 100, 2, 64, true, true, 0, 0, true);  // d 64's 64-query backward (variant 0, before v20)
  bad += run_case(2, 190, 1, 128, true, true, 10, 10, true);
  bad += run_case(1, 129, 1, 128, false, true, 10, 10, true);
  // the other forward loops (sm90_capi.cu: without overlap 3, 12; overlap alone 4; overlap and ping-pong 5, 13, 23)
  bad += run_case(1, 300, 2, 64, true, true, 0, 3, true);
  bad += run_case(1, 201, 1, 64, false, true, 0, 4, true);
  bad += run_case(1, 201, 1, 64, true, true, 0, 5, true);
  bad += run_case(2, 190, 1, 128, true, true, 10, 13, true);
  bad += run_case(1, 129, 1, 128, false, true, 10, 12, true);
  bad += run_case(1, 300, 1, 80, true, true, 20, 23, true);
  // d 96: production dispatch (one head, T 300: the mma.sync forward, the Hopper backward's split query loop), the
  // Hopper kernels directly
  bad += run_case(1, 300, 1, 96, true, true, 0);
  bad += run_case(1, 70, 1, 96, false, false, 0);
  bad += run_case(2, 190, 1, 96, true, true, 31, 32, true);
  bad += run_case(1, 129, 1, 96, false, true, 31, 32, true);
  bad += run_case(1, 201, 1, 96, true, true, 30, 30, true);  // the overlap loop, the 240-register backward
  // the persistent forwards (production since v22) with more query tiles than SMs (each CTA runs several)
  bad += run_case(1, 1000, 40, 64, true, true, 7, 6, true);
  bad += run_case(1, 1000, 40, 128, false, true, 10, 16, true);
  bad += run_case(1, 1000, 40, 128, true, true, 10, 15, true);
  bad += run_case(2, 500, 40, 80, true, true, 20, 24, true);
  bad += run_case(1, 1000, 40, 96, true, true, 31, 34, true);
  std::printf("smoke: %s\n", bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
