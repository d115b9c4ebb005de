// Fused softmax cross-entropy over a row of logits, with its gradient (llm.c `llmc/fused_classifier.cuh`,
// fused_classifier_kernel5: one block per row, loss and dlogits written in place of the logits).
//   lse[n]     = m + log(sum_v exp(x[n,v] - m)),  m = max_v x[n,v]       (online max/sum: Milakov & Gimelshein 2018)
//   losses[n]  = lse[n] - x[n, t_n]
//   dlogits[n,v] = dscale * (exp(x[n,v] - lse[n]) - [v == t_n])          (optional; may alias the logits)
// logits and dlogits [N, V] row-major, f32 or bf16; targets i32 [N]; losses f32 [N]; arithmetic in fp32.
//
// Two kernels. The cluster kernel (sm_90; V % 8 == 0, 16-byte aligned rows of at most 8 x 80 KiB) reads each
// element from global memory once: a row is split over a cluster of CTAs that copy their segments into shared memory
// (cp.async), merge their (max, sum) pairs through distributed shared memory, and write dlogits from shared memory.
// The 8B head's chunk (2560 x 151936 bf16) took 2.0 ms with one block per row and a second read of the row (2560 rows
// in flight, 778 MB: beyond L2, so the second read came from HBM; scalar 2-byte loads); see results/NOTES.md (v11).
// The scalar kernel (one block per row, a second read of the row) covers any V and alignment.
#include "common.cuh"
#include "cross_entropy.cuh"
#include "flash_attn/mma.cuh"  // cp_async_16 / _commit / _wait, exp2_fast (ex2.approx.ftz)

#include <cooperative_groups.h>

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 512;

// No __restrict__ on logits/dlogits: they may be the same buffer (each element is read, then written, by one thread).
template <class TL, class TD>
__global__ __launch_bounds__(kThreads) void cross_entropy_kernel(float* __restrict__ losses, TD* dlogits,
                                                                 const TL* logits, const int32_t* __restrict__ targets,
                                                                 int64_t V, float dscale) {
  __shared__ MaxSum shared[32];
  const int64_t n = blockIdx.x;
  const TL* xr = logits + n * V;
  MaxSum acc{-INFINITY, 0.f};
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {  // one exp per element
    const float x = to_f32(xr[v]);
    if (x > acc.m) {
      acc.s = acc.s * expf(acc.m - x) + 1.f;  // exp(-inf) = 0 on the first element
      acc.m = x;
    } else if (x != -INFINITY) {  // a -inf logit adds 0 (and -inf - -inf would be NaN); a NaN one adds NaN
      acc.s += expf(x - acc.m);
    }
  }
  acc = block_maxsum(acc, shared);
  const float lse = acc.m + logf(acc.s);
  const int32_t t = targets[n];
  const bool valid = t >= 0 && t < V;
  const float x_t = valid ? to_f32(xr[t]) : NAN;  // read before any thread overwrites the row (dlogits may alias)
  __syncthreads();
  if (threadIdx.x == 0) losses[n] = lse - x_t;
  if (dlogits == nullptr) return;
  TD* dr = dlogits + n * V;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    const float p = valid ? expf(to_f32(xr[v]) - lse) : NAN;
    dr[v] = from_f32<TD>(dscale * (p - (v == t ? 1.f : 0.f)));
  }
}

// ---- cluster kernel ------------------------------------------------------------------------------------------------
// A row is split over a thread-block cluster of cs CTAs (cs = 1..8); each CTA copies its segment into shared memory
// once (cp.async, 16 bytes per copy, the whole segment in flight), finds the segment's (max, sum) there, and the
// cluster merges its cs pairs through distributed shared memory (every CTA in rank order: the same lse in all). The
// dlogits are then computed from shared memory: one read of the logits from global memory and one write.
constexpr int kVec = 8;  // elements per vector (16 bytes of bf16, 32 of f32)
constexpr int kClusterThreads = 512;
// Per CTA, so that two CTAs share an SM (one copies while the other computes). Timed on the 2560 x 151936 bf16 chunk
// (v11 call 4; segments of 38 / 51 / 76 / 102 / 152 KiB = clusters of 8 / 6 / 4 / 3 / 2): 0.707 / 0.631 / 0.606 /
// 0.619 / 0.672 ms.
constexpr int64_t kMaxSegmentBytes = 80 * 1024;
constexpr int kMaxCluster = 8;                   // the portable cluster size
constexpr float kLog2e = 1.4426950408889634f;

template <class T>
__device__ __forceinline__ void load8(const T* p, float (&x)[kVec]);
template <>
__device__ __forceinline__ void load8<bf16>(const bf16* p, float (&x)[kVec]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const bf16* b = reinterpret_cast<const bf16*>(&u);
#pragma unroll
  for (int k = 0; k < kVec; ++k) x[k] = __bfloat162float(b[k]);
}
template <>
__device__ __forceinline__ void load8<float>(const float* p, float (&x)[kVec]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w, x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
}
template <class T>
__device__ __forceinline__ void store8(T* p, const float (&x)[kVec]);
template <>
__device__ __forceinline__ void store8<bf16>(bf16* p, const float (&x)[kVec]) {
  uint4 u;
  bf16* b = reinterpret_cast<bf16*>(&u);
#pragma unroll
  for (int k = 0; k < kVec; ++k) b[k] = __float2bfloat16(x[k]);
  *reinterpret_cast<uint4*>(p) = u;
}
template <>
__device__ __forceinline__ void store8<float>(float* p, const float (&x)[kVec]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(x[0], x[1], x[2], x[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(x[4], x[5], x[6], x[7]);
}

// Same results as cross_entropy_kernel up to fp32 rounding (another summation order; exp as exp2 of x·log2e - m·log2e).
// Grid N·cs CTAs in clusters of cs: row n = blockIdx.x / cs, segment = the CTA's rank (seg_vecs vectors of 8 each,
// the last one shorter); V % 8 == 0, 16-byte aligned rows; dynamic shared memory seg_vecs · 8 · sizeof(TL).
template <class TL, class TD>
__global__ __launch_bounds__(kClusterThreads) void cross_entropy_cluster_kernel(float* __restrict__ losses, TD* dlogits,
                                                                            const TL* logits,
                                                                            const int32_t* __restrict__ targets,
                                                                            int64_t V, int seg_vecs, float dscale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // clusters need sm_90; the launcher picks the scalar kernel below that (cluster_launch_ok)
#else
  extern __shared__ __align__(16) unsigned char segment_raw[];
  __shared__ MaxSum shared[32];
  __shared__ MaxSum cta_pair;
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = int(cluster.block_rank()), cs = int(cluster.num_blocks());
  const int64_t n = blockIdx.x / cs, nv = V / kVec, v0 = int64_t(rank) * seg_vecs;
  const int cnt = int(v0 >= nv ? 0 : (nv - v0 < seg_vecs ? nv - v0 : seg_vecs));
  const TL* xr = logits + n * V;
  TL* seg = reinterpret_cast<TL*>(segment_raw);
  constexpr int kPieces = int(sizeof(TL)) * kVec / 16;  // 16-byte copies per vector
  {
    const char* src = reinterpret_cast<const char*>(xr + v0 * kVec);
    for (int i = threadIdx.x; i < cnt * kPieces; i += blockDim.x)
      flash::cp_async_16(segment_raw + i * 16, src + i * 16, true);
    flash::cp_async_commit();
    flash::cp_async_wait<0>();
  }
  __syncthreads();
  MaxSum acc{-INFINITY, 0.f};
  bool nan = false;  // fmaxf drops NaN: a NaN logit makes the sum NaN (and, through maxsum_merge, the row's lse)
  for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
    float x[kVec];
    load8(seg + i * kVec, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      acc.m = fmaxf(acc.m, x[k]);
      nan |= x[k] != x[k];
    }
  }
  if (nan) {
    acc.s = NAN;
  } else if (acc.m != -INFINITY) {  // -inf logits add exp2(-inf) = 0
    const float ml = acc.m * kLog2e;
    for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
      float x[kVec];
      load8(seg + i * kVec, x);
#pragma unroll
      for (int k = 0; k < kVec; ++k) acc.s += flash::exp2_fast(fmaf(x[k], kLog2e, -ml));
    }
  }
  acc = block_maxsum(acc, shared);
  if (threadIdx.x == 0) cta_pair = acc;
  cluster.sync();  // every CTA's pair is published
  MaxSum row{-INFINITY, 0.f};
  for (int r = 0; r < cs; ++r) row = maxsum_merge(row, *cluster.map_shared_rank(&cta_pair, r));
  const float lse = row.m + logf(row.s);
  const int32_t t = targets[n];
  const bool valid = t >= 0 && t < V;
  if (rank == 0 && threadIdx.x == 0) losses[n] = lse - (valid ? to_f32(xr[t]) : NAN);
  cluster.sync();  // the peers' pairs and x_t are read before any CTA writes dlogits (they may alias) or exits
  if (dlogits == nullptr) return;
  TD* dr = dlogits + n * V + v0 * kVec;
  const float ll = valid ? lse * kLog2e : NAN;
  const int64_t tl = int64_t(t) - v0 * kVec;  // the target's index inside the segment (may be outside)
  for (int i = threadIdx.x; i < cnt; i += blockDim.x) {
    float x[kVec], d[kVec];
    load8(seg + i * kVec, x);
#pragma unroll
    for (int k = 0; k < kVec; ++k) d[k] = dscale * (flash::exp2_fast(fmaf(x[k], kLog2e, -ll)) - (int64_t(i) * kVec + k == tl ? 1.f : 0.f));
    store8(dr + int64_t(i) * kVec, d);
  }
#endif
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/// Whether `kernel` can run its cluster code here: the device launches thread-block clusters (compute capability 9.0
/// or newer) and the kernel's code was compiled for it (PTX 9.0 or newer; a build for sm_80 JIT-compiled on an H100
/// holds the __trap() body). The device's capability is cached per device.
template <class K>
bool cluster_launch_ok(K kernel) {
  static int major[64] = {};
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  if (dev < 0 || dev >= 64) return false;
  if (major[dev] == 0) CUDA_CHECK(cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev));
  if (major[dev] < 9) return false;
  static const int ptx = [kernel] {  // per instantiation, once
    cudaFuncAttributes a{};
    CUDA_CHECK(cudaFuncGetAttributes(&a, kernel));
    return a.ptxVersion;
  }();
  return ptx >= 90;
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void cross_entropy(float* losses, void* dlogits, DType tdl, const void* logits, DType tl, const int32_t* targets,
                   int64_t N, int64_t V, float dscale, cudaStream_t s) {
  if (N <= 0) return;
  const bool aligned = V % kVec == 0 && aligned16(logits) && (dlogits == nullptr || aligned16(dlogits));
  dispatch_float(tl, "cross_entropy logits", [&](auto al) {
    dispatch_float(dlogits ? tdl : tl, "cross_entropy dlogits", [&](auto ad) {
      using TL = typename decltype(al)::type;
      using TD = typename decltype(ad)::type;
      const int64_t row_bytes = V * int64_t(sizeof(TL));
      const int cs = int(ceil_div(row_bytes, kMaxSegmentBytes));
      auto* kernel = cross_entropy_cluster_kernel<TL, TD>;
      if (aligned && cs <= kMaxCluster && cluster_launch_ok(kernel)) {
        const int seg_vecs = int(ceil_div(V / kVec, int64_t(cs)));
        const size_t smem = size_t(seg_vecs) * kVec * sizeof(TL);
        set_smem(kernel, smem);
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(unsigned(N * cs));
        cfg.blockDim = dim3(kClusterThreads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = s;
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = unsigned(cs);
        attr.val.clusterDim.y = 1;
        attr.val.clusterDim.z = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, losses, static_cast<TD*>(dlogits), static_cast<const TL*>(logits),
                                      targets, V, seg_vecs, dscale));
      } else {
        cross_entropy_kernel<TL, TD><<<unsigned(N), kThreads, 0, s>>>(
            losses, static_cast<TD*>(dlogits), static_cast<const TL*>(logits), targets, V, dscale);
      }
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
