// Rotary position embedding (Su et al. 2021, RoFormer, arXiv:2104.09864, eq. 34; DESIGN.md model contract):
//   for row n = b*T + t, each head h of q and of k, and each pair i < d_head/2:
//     angle = t * theta^(-2i/d_head)   (negated for the inverse, i.e. the backward pass: R(-a) = R(a)^T)
//     [x_{2i}, x_{2i+1}] <- [x_{2i} cos - x_{2i+1} sin,  x_{2i} sin + x_{2i+1} cos]
// qkv [B*T, 3D] row-major, f32 or bf16, rotated in place (the v columns 2D..3D-1 are untouched); D = H*d_head.
// The angle and its sine/cosine are computed in fp64 and rounded to fp32 once: an fp32 angle t*inv_freq is off by
// up to t * 2^-24 radians (3e-5 at t = 512, 2e-3 at t = 32768), which would be the largest error of the op.
// The (cos, sin) table [T, d_head/2] is made once per (T, d_head, theta) by rope_table and kept by the backend;
// the rotation then reads it (L2-resident) instead of evaluating pow and sincos in fp64 per element.
#include "common.cuh"
#include "rope.cuh"

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

// table[t, i] = (cos, sin) of t * theta^(-2i/d_head), computed in fp64 and rounded once.
__global__ __launch_bounds__(kThreads) void rope_table_kernel(float2* __restrict__ table, int T_, int half,
                                                              double theta, int d_head) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(T_) * half) return;
  const int t = int(idx / half), i = int(idx % half);
  const double angle = double(t) * pow(theta, -2.0 * i / double(d_head));
  double sd, cd;
  sincos(angle, &sd, &cd);
  table[idx] = make_float2(float(cd), float(sd));
}

// One thread per (row, pair of q or k): rows on blockIdx.y (grid-stride), the row's D pairs (q heads then k heads,
// contiguous) on x, so adjacent threads touch adjacent pairs; each pair moves as one 2-element access.
template <class T>
struct alignas(2 * sizeof(T)) Pair {
  T a, b;
};

template <class T>
__global__ __launch_bounds__(kThreads) void rope_kernel(T* __restrict__ qkv, const float2* __restrict__ table,
                                                        int64_t rows, int T_, int H, int d_head, float sign) {
  const int half = d_head / 2;
  const int D = H * d_head;  // pairs of q and k in one row
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= D) return;
  const int i = j % half;
  for (int64_t n = blockIdx.y; n < rows; n += gridDim.y) {
    const float2 cs = table[int64_t(n % T_) * half + i];
    const float c = cs.x, sn = sign * cs.y;
    Pair<T>* p = reinterpret_cast<Pair<T>*>(qkv + n * 3 * int64_t(D) + 2 * int64_t(j));
    Pair<T> v = *p;
    const float x0 = to_f32(v.a), x1 = to_f32(v.b);
    v.a = from_f32<T>(x0 * c - x1 * sn);
    v.b = from_f32<T>(x0 * sn + x1 * c);
    *p = v;
  }
}

// Four pairs per thread (8 elements: one 16-byte access in bf16) when d_head / 2 is a multiple of 4, so that a
// thread's pairs lie in one head and use table entries i..i+3 (two 16-byte reads).
constexpr int kPairs = 4;
template <class T>
struct alignas(16) Pairs4 {
  T v[2 * kPairs];
};

template <class T>
__global__ __launch_bounds__(kThreads) void rope4_kernel(T* __restrict__ qkv, const float4* __restrict__ table,
                                                         int64_t rows, int T_, int H, int d_head, float sign) {
  const int half = d_head / 2;
  const int D = H * d_head;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * kPairs;  // first pair of this thread
  if (j >= D) return;
  const int i = j % half;  // multiple of 4
  for (int64_t n = blockIdx.y; n < rows; n += gridDim.y) {
    const float4* tr = table + (int64_t(n % T_) * half + i) / 2;  // (cos, sin) x 4 = two float4
    const float4 t01 = tr[0], t23 = tr[1];
    const float cs[2 * kPairs] = {t01.x, t01.y, t01.z, t01.w, t23.x, t23.y, t23.z, t23.w};
    Pairs4<T>* p = reinterpret_cast<Pairs4<T>*>(qkv + n * 3 * int64_t(D) + 2 * int64_t(j));
    Pairs4<T> v = *p;
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const float c = cs[2 * k], sn = sign * cs[2 * k + 1];
      const float x0 = to_f32(v.v[2 * k]), x1 = to_f32(v.v[2 * k + 1]);
      v.v[2 * k] = from_f32<T>(x0 * c - x1 * sn);
      v.v[2 * k + 1] = from_f32<T>(x0 * sn + x1 * c);
    }
    *p = v;
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void rope_table(float* table, int T, int d_head, double theta, cudaStream_t s) {
  const int64_t n = int64_t(T) * (d_head / 2);
  if (n <= 0) return;
  rope_table_kernel<<<unsigned(ceil_div<int64_t>(n, kThreads)), kThreads, 0, s>>>(reinterpret_cast<float2*>(table), T,
                                                                                d_head / 2, theta, d_head);
  CUDA_CHECK(cudaGetLastError());
}

void rope(void* qkv, DType t, const float* table, int64_t rows, int T, int H, int d_head, bool inverse,
          cudaStream_t s) {
  const int64_t n = rows * H * d_head;  // pairs of q and k
  if (n <= 0) return;
  dispatch_float(t, "rope", [&](auto tag) {
    using TT = typename decltype(tag)::type;
    const unsigned gy = unsigned(rows < 65535 ? rows : 65535);
    const bool aligned = (reinterpret_cast<uintptr_t>(qkv) & 15u) == 0 && (reinterpret_cast<uintptr_t>(table) & 15u) == 0 &&
                         (3 * int64_t(H) * d_head * int64_t(sizeof(TT))) % 16 == 0;  // every row start 16-byte aligned
    if ((d_head / 2) % kPairs == 0 && aligned) {
      const dim3 grid(unsigned(ceil_div<int64_t>(int64_t(H) * d_head / kPairs, kThreads)), gy);
      rope4_kernel<TT><<<grid, kThreads, 0, s>>>(static_cast<TT*>(qkv), reinterpret_cast<const float4*>(table), rows,
                                                 T, H, d_head, inverse ? -1.f : 1.f);
    } else {
      const dim3 grid(unsigned(ceil_div<int64_t>(int64_t(H) * d_head, kThreads)), gy);
      rope_kernel<TT><<<grid, kThreads, 0, s>>>(static_cast<TT*>(qkv), reinterpret_cast<const float2*>(table), rows,
                                                T, H, d_head, inverse ? -1.f : 1.f);
    }
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
