// Warp-level building blocks of the bf16 FlashAttention-2 kernels, as inline PTX (PTX ISA 8.x):
//  - cp.async 16-byte copies global -> shared with zero fill (the tile pipeline),
//  - ldmatrix (.trans) loads of 8x8 b16 matrices into mma fragments,
//  - mma.sync.m16n8k16 bf16 x bf16 -> f32,
//  - the fragment layout helpers.
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A 16x16 (row): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)   (bf16 pairs)
//   B 16x8 (col):  b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g)
//   C 16x8 (f32):  c[0], c[1] = (g, 2t), (g, 2t+1);  c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// So the C fragments of two adjacent n8 tiles, converted to bf16 pairs, are the A fragment of one k16 step
// (flash-attention keeps P in registers the same way: `convert_layout_acc_Aregs`).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace trainer::flash {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global -> shared, asynchronously; src_bytes = 0 fills the 16 bytes with zeros (nothing is read).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most N committed groups of this thread are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives matrix i's
/// (row lane/4, cols 2(lane%4), +1).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
/// As ldmatrix_x4, each matrix transposed: register i receives matrix i's (rows 2(lane%4), +1; col lane/4).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

/// c += a b, m16n8k16, bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Two floats -> one register of two bf16 (x in the low half: the lower column), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}

/// The A fragment of k16 step j from the f32 C fragments c[2j], c[2j+1] (see the layouts above).
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack_bf16(c0[0], c0[1]);
  a[1] = pack_bf16(c0[2], c0[3]);
  a[2] = pack_bf16(c1[0], c1[1]);
  a[3] = pack_bf16(c1[2], c1[3]);
}

/// Shared-memory tile of kRows x kCols bf16, row-major, each row padded by 8 elements (16 bytes) so that the 8 row
/// addresses of one ldmatrix fall in distinct banks for every kCols that is a multiple of 16
/// (row stride (kCols + 8) / 2 words = 4 (mod 8) or 12, 20, 28 (mod 32): 8 rows cover all 32 banks).
template <int kCols>
struct Padded {
  static constexpr int kStride = kCols + 8;  // elements
};

/// ldmatrix lane addresses (lane l) for the usual fragments, over a padded row-major tile `base` (element pointer):
///  a_frag: A of rows r0..r0+15, cols c0..c0+15 (non-trans).
///  b_frag_nk: B of two n8 tiles from a tile stored [n][k] (keys x d for Q Kᵀ): rows n0..n0+15, cols k0..k0+15
///             -> r[0], r[1] = B of n tile n0, r[2], r[3] = B of n tile n0 + 8 (non-trans).
///  b_frag_kn: B of two n8 tiles from a tile stored [k][n] (keys x d for P V): rows k0..k0+15, cols n0..n0+15
///             -> r[0], r[1] = n tile n0, r[2], r[3] = n tile n0 + 8 (trans).
///  a_frag_t: A of rows (m) m0..m0+15, cols (k) k0..k0+15 from a tile stored [k][m] (trans).
template <int kStride>
__device__ __forceinline__ const __nv_bfloat16* a_frag_addr(const __nv_bfloat16* base, int r0, int c0, int lane) {
  return base + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + c0 + (lane >> 4) * 8;
}
template <int kStride>
__device__ __forceinline__ const __nv_bfloat16* b_nk_addr(const __nv_bfloat16* base, int n0, int k0, int lane) {
  return base + (n0 + (lane & 7) + (lane >> 4) * 8) * kStride + k0 + ((lane >> 3) & 1) * 8;
}
template <int kStride>
__device__ __forceinline__ const __nv_bfloat16* b_kn_addr(const __nv_bfloat16* base, int k0, int n0, int lane) {
  return base + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + n0 + (lane >> 4) * 8;
}
template <int kStride>
__device__ __forceinline__ const __nv_bfloat16* a_t_addr(const __nv_bfloat16* base, int m0, int k0, int lane) {
  return base + (k0 + (lane & 7) + (lane >> 4) * 8) * kStride + m0 + ((lane >> 3) & 1) * 8;
}

/// Copies a tile of kRows rows x kCols bf16 (kCols % 8 == 0) from global (row `row0` of a view with row stride
/// `ld` elements, rows >= nrows zero-filled) into a padded shared tile, 16 bytes per cp.async, kThreads threads.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* smem, const __nv_bfloat16* gmem, int64_t ld, int row0,
                                                int nrows, int tid) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
      const bool valid = row0 + r < nrows;
      const __nv_bfloat16* src = valid ? gmem + int64_t(row0 + r) * ld + col : gmem;
      cp_async_16(smem + r * (kCols + 8) + col, src, valid);
    }
  }
}

/// 2^x by the special-function unit (ex2.approx.ftz: about 2 ulp; 2^-inf = 0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace trainer::flash
