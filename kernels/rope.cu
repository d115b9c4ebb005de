// Rotary position embedding (Su et al. 2021, RoFormer, arXiv:2104.09864, eq. 34; DESIGN.md model contract):
//   for row n = b*T + t, each head h of q and of k, and each pair i < d_head/2:
//     angle = t * theta^(-2i/d_head)   (negated for the inverse, i.e. the backward pass: R(-a) = R(a)^T)
//     [x_{2i}, x_{2i+1}] <- [x_{2i} cos - x_{2i+1} sin,  x_{2i} sin + x_{2i+1} cos]
// qkv [B*T, 3D] row-major, f32 or bf16, rotated in place (the v columns 2D..3D-1 are untouched); D = H*d_head.
// The angle and its sine/cosine are computed in fp64 and rounded to fp32 once: an fp32 angle t*inv_freq is off by
// up to t * 2^-24 radians (3e-5 at t = 512, 2e-3 at t = 32768), which would be the largest error of the op.
// One thread per (row, pair i); it applies the same rotation to all 2H heads of q and k.
#include "common.cuh"
#include "rope.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

template <class T>
__global__ __launch_bounds__(kThreads) void rope_kernel(T* __restrict__ qkv, int64_t rows, int T_, int H, int d_head,
                                                        double theta, float sign) {
  const int half = d_head / 2;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t n = idx / half;
  const int i = int(idx % half);
  const int t = int(n % T_);
  const double angle = double(t) * pow(theta, -2.0 * i / double(d_head));
  double sd, cd;
  sincos(angle, &sd, &cd);
  const float c = float(cd), sn = sign * float(sd);
  const int64_t D = int64_t(H) * d_head;
  T* row = qkv + n * 3 * D + 2 * i;
  for (int hh = 0; hh < 2 * H; ++hh) {  // heads of q, then heads of k: columns hh * d_head (k starts at D)
    T* p = row + int64_t(hh) * d_head;
    const float x0 = to_f32(p[0]), x1 = to_f32(p[1]);
    p[0] = from_f32<T>(x0 * c - x1 * sn);
    p[1] = from_f32<T>(x0 * sn + x1 * c);
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void rope(void* qkv, DType t, int64_t rows, int T, int H, int d_head, double theta, bool inverse, cudaStream_t s) {
  const int64_t n = rows * (d_head / 2);
  if (n <= 0) return;
  dispatch_float(t, "rope", [&](auto tag) {
    using TT = typename decltype(tag)::type;
    rope_kernel<TT><<<unsigned(ceil_div<int64_t>(n, kThreads)), kThreads, 0, s>>>(static_cast<TT*>(qkv), rows, T, H,
                                                                                d_head, theta, inverse ? -1.f : 1.f);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
