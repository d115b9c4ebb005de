// Warp-level building blocks of the bf16 FlashAttention-2 kernels, as inline PTX (PTX ISA 8.x):
//  - cp.async 16-byte copies global -> shared with zero fill (the tile pipeline),
//  - ldmatrix (.trans) loads of 8x8 b16 matrices into mma fragments,
//  - mma.sync.m16n8k16 bf16 x bf16 -> f32,
//  - the fragment layout helpers,
//  - the fp32 (3xTF32) versions of the fragments, loads and mma under the same names (below).
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
#include <type_traits>

#include "common.cuh"  // smem_addr

namespace trainer::flash {

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

/// Stores a pair of f32 values as f32 or bf16 (an output element pair of any epilogue; base + off 8- / 4-byte aligned).
__device__ __forceinline__ void store_pair(void* base, int64_t off, bool f32, float x, float y) {
  if (f32)
    *reinterpret_cast<float2*>(static_cast<float*>(base) + off) = make_float2(x, y);
  else
    *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(base) + off) = __floats2bfloat162_rn(x, y);
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

/// 2^x by the special-function unit (ex2.approx.ftz: about 2 ulp; 2^-inf = 0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---------------------------------------------------------------------------------------------------------------
// fp32 inputs on the tensor cores: 3xTF32 (NVIDIA CUTLASS "3xTF32"; Ootomo & Yokota 2022, arXiv:2203.03341).
// Each fp32 operand x is split into hi = x rounded to TF32 (10-bit mantissa) and lo = x - hi (exact in fp32; the
// tensor core reads its top 10 mantissa bits), and a b ~ a_lo b_hi + a_hi b_lo + a_hi b_hi (m16n8k8 .tf32 mma,
// fp32 accumulation): the dropped a_lo b_lo and lo's truncation leave a relative error of about 2^-21 per product,
// fp32's order, at a third of the TF32 rate (no TF32 rounding reaches the result, whatever fp32_matmul says).
//
// The fp32 fragment register is a Tf32Pair: the two fp32 values at the positions of one bf16 pair of the m16n8k16
// layouts above, split. A k16 step of the bf16 kernels becomes two k8 mmas whose k slots are permuted within each
// half: slot t holds k = 2t and slot t + 4 holds k = 2t + 1 (PTX m16n8k8 .tf32: a0 = (g, t), a1 = (g+8, t),
// a2 = (g, t+4), a3 = (g+8, t+4); b0 = (k t, n g), b1 = (k t+4, n g)). A sum over k does not care about the order,
// so every kernel written for the bf16 fragments runs unchanged on Tf32Pair fragments: same C layout, P and dS
// stay in registers (c_to_a), and the fragment loads below return the same logical elements as ldmatrix.
//
// fp32 shared tiles: row stride kStride = cols + 8 floats (= 8 or 24 mod 32) and, in rows with bit 2 set, column
// bit 3 flipped (tile_off). Then the 64-bit fragment loads of 16 lanes (rows g, cols 2t) and the 32-bit transposed
// loads (rows 2t, cols g) of 32 lanes each hit 32 distinct banks.
// ---------------------------------------------------------------------------------------------------------------

struct Tf32Pair {
  uint32_t hi[2], lo[2];
};

/// x -> (hi, lo): hi = x rounded to TF32 (half away from zero on the magnitude), lo = x - hi (exact). lo keeps its
/// low 13 bits: the tensor core reads a .tf32 operand's sign, exponent and top 10 mantissa bits (PTX calls the tf32
/// layout implementation-defined; CUTLASS's 3xTF32 relies on the same), which truncates lo at ~2^-22 relative.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  const uint32_t h = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  hi = h;
  lo = __float_as_uint(x - __uint_as_float(h));
}
__device__ __forceinline__ Tf32Pair split_pair(float x, float y) {
  Tf32Pair r;
  split_tf32(x, r.hi[0], r.lo[0]);
  split_tf32(y, r.hi[1], r.lo[1]);
  return r;
}

/// c += a b, m16n8k8, tf32 inputs (32-bit registers), f32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// One k8 half in 3xTF32: A rows g / g+8 from x (row g) and y (row g+8), B from b (the k slots t, t+4 are the
/// pair's two values). The small products first.
__device__ __forceinline__ void mma_3xtf32_k8(float (&c)[4], const Tf32Pair& x, const Tf32Pair& y, const Tf32Pair& b) {
  mma_tf32(c, x.lo[0], y.lo[0], x.lo[1], y.lo[1], b.hi[0], b.hi[1]);
  mma_tf32(c, x.hi[0], y.hi[0], x.hi[1], y.hi[1], b.lo[0], b.lo[1]);
  mma_tf32(c, x.hi[0], y.hi[0], x.hi[1], y.hi[1], b.hi[0], b.hi[1]);
}

/// c += a b for one k16 step on fp32 fragments (the bf16 m16n8k16 positions; two 3xTF32 k8 halves).
__device__ __forceinline__ void mma(float (&c)[4], const Tf32Pair (&a)[4], const Tf32Pair& b0, const Tf32Pair& b1) {
  mma_3xtf32_k8(c, a[0], a[1], b0);
  mma_3xtf32_k8(c, a[2], a[3], b1);
}
/// The bf16 version under the same name (the kernels call mma() for either element type).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_bf16(c, a, b0, b1);
}

/// The A fragment of k16 step j from the f32 C fragments c[2j], c[2j+1], fp32 version (split; see c_to_a).
__device__ __forceinline__ void c_to_a(Tf32Pair (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = split_pair(c0[0], c0[1]);
  a[1] = split_pair(c0[2], c0[3]);
  a[2] = split_pair(c1[0], c1[1]);
  a[3] = split_pair(c1[2], c1[3]);
}

/// The fragment register type of element type E: uint32_t (two bf16) or Tf32Pair (two split fp32).
template <class E>
using FragReg = std::conditional_t<std::is_same_v<E, float>, Tf32Pair, uint32_t>;

/// Element offset of (row r, column c) in a shared tile of row stride kStride: plain for bf16, column bit 3 flipped
/// in rows with bit 2 set for fp32 (see above).
template <int kStride>
__device__ __forceinline__ int tile_off(const __nv_bfloat16*, int r, int c) {
  return r * kStride + c;
}
template <int kStride>
__device__ __forceinline__ int tile_off(const float*, int r, int c) {
  static_assert(kStride % 16 == 8, "fp32 tile rows are 8 (mod 16) floats");
  return r * kStride + (c ^ ((r & 4) << 1));
}

// Fragment loads over a shared tile (element type bf16: ldmatrix; fp32: 64-bit or two 32-bit loads, split):
//  load_a:    A of rows r0..r0+15, cols c0..c0+15 of a tile stored [m][k].
//  load_b_nk: B of two n8 tiles from a tile stored [n][k]: b[0], b[1] = n tile n0 (k c0.., c0+8..), b[2], b[3] =
//             n tile n0 + 8.
//  load_b_kn: the same from a tile stored [k][n] (transposed read).
//  load_a_t:  A of rows (m) m0..m0+15, cols (k) k0..k0+15 from a tile stored [k][m] (transposed read).
template <int kStride>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* base, int r0, int c0, int lane) {
  ldmatrix_x4(a, a_frag_addr<kStride>(base, r0, c0, lane));
}
template <int kStride>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const __nv_bfloat16* base, int n0, int k0, int lane) {
  ldmatrix_x4(b, b_nk_addr<kStride>(base, n0, k0, lane));
}
template <int kStride>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const __nv_bfloat16* base, int k0, int n0, int lane) {
  ldmatrix_x4_trans(b, b_kn_addr<kStride>(base, k0, n0, lane));
}
template <int kStride>
__device__ __forceinline__ void load_a_t(uint32_t (&a)[4], const __nv_bfloat16* base, int m0, int k0, int lane) {
  ldmatrix_x4_trans(a, a_t_addr<kStride>(base, m0, k0, lane));
}

/// fp32 pair (r, c), (r, c + 1) (one 64-bit load), split.
template <int kStride>
__device__ __forceinline__ Tf32Pair lds_row_pair(const float* base, int r, int c) {
  const float2 v = *reinterpret_cast<const float2*>(base + tile_off<kStride>(base, r, c));
  return split_pair(v.x, v.y);
}
/// fp32 pair (r, c), (r + 1, c) (two 32-bit loads), split.
template <int kStride>
__device__ __forceinline__ Tf32Pair lds_col_pair(const float* base, int r, int c) {
  return split_pair(base[tile_off<kStride>(base, r, c)], base[tile_off<kStride>(base, r + 1, c)]);
}
template <int kStride>
__device__ __forceinline__ void load_a(Tf32Pair (&a)[4], const float* base, int r0, int c0, int lane) {
  const int g = lane / 4, t = lane % 4;
  a[0] = lds_row_pair<kStride>(base, r0 + g, c0 + 2 * t);
  a[1] = lds_row_pair<kStride>(base, r0 + g + 8, c0 + 2 * t);
  a[2] = lds_row_pair<kStride>(base, r0 + g, c0 + 2 * t + 8);
  a[3] = lds_row_pair<kStride>(base, r0 + g + 8, c0 + 2 * t + 8);
}
template <int kStride>
__device__ __forceinline__ void load_b_nk(Tf32Pair (&b)[4], const float* base, int n0, int k0, int lane) {
  const int g = lane / 4, t = lane % 4;
  b[0] = lds_row_pair<kStride>(base, n0 + g, k0 + 2 * t);
  b[1] = lds_row_pair<kStride>(base, n0 + g, k0 + 2 * t + 8);
  b[2] = lds_row_pair<kStride>(base, n0 + 8 + g, k0 + 2 * t);
  b[3] = lds_row_pair<kStride>(base, n0 + 8 + g, k0 + 2 * t + 8);
}
template <int kStride>
__device__ __forceinline__ void load_b_kn(Tf32Pair (&b)[4], const float* base, int k0, int n0, int lane) {
  const int g = lane / 4, t = lane % 4;
  b[0] = lds_col_pair<kStride>(base, k0 + 2 * t, n0 + g);
  b[1] = lds_col_pair<kStride>(base, k0 + 2 * t + 8, n0 + g);
  b[2] = lds_col_pair<kStride>(base, k0 + 2 * t, n0 + 8 + g);
  b[3] = lds_col_pair<kStride>(base, k0 + 2 * t + 8, n0 + 8 + g);
}
template <int kStride>
__device__ __forceinline__ void load_a_t(Tf32Pair (&a)[4], const float* base, int m0, int k0, int lane) {
  const int g = lane / 4, t = lane % 4;
  a[0] = lds_col_pair<kStride>(base, k0 + 2 * t, m0 + g);
  a[1] = lds_col_pair<kStride>(base, k0 + 2 * t, m0 + g + 8);
  a[2] = lds_col_pair<kStride>(base, k0 + 2 * t + 8, m0 + g);
  a[3] = lds_col_pair<kStride>(base, k0 + 2 * t + 8, m0 + g + 8);
}

/// Stores the pair (r, c), (r, c + 1) of f32 values into a shared tile of bf16 (rounded) or fp32.
template <int kStride>
__device__ __forceinline__ void sts_pair(__nv_bfloat16* base, int r, int c, float x, float y) {
  *reinterpret_cast<uint32_t*>(base + tile_off<kStride>(base, r, c)) = pack_bf16(x, y);
}
template <int kStride>
__device__ __forceinline__ void sts_pair(float* base, int r, int c, float x, float y) {
  *reinterpret_cast<float2*>(base + tile_off<kStride>(base, r, c)) = make_float2(x, y);
}

/// Copies a tile of kRows rows x kCols elements (bf16 or fp32; rows of whole 16-byte chunks) from global (row `row0`
/// of a view with row stride `ld` elements, rows >= nrows zero-filled) into a padded shared tile of row stride
/// kCols + 8 (tile_off), 16 bytes per cp.async, kThreads threads.
template <int kRows, int kCols, int kThreads, class E>
__device__ __forceinline__ void load_tile_async(E* smem, const E* gmem, int64_t ld, int row0, int nrows, int tid) {
  constexpr int kPerChunk = 16 / int(sizeof(E));
  constexpr int kChunksPerRow = kCols / kPerChunk;
  constexpr int kChunks = kRows * kChunksPerRow;
  constexpr int kIters = (kChunks + kThreads - 1) / kThreads;
  static_assert(kCols % kPerChunk == 0, "rows of whole 16-byte chunks");
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      const int r = c / kChunksPerRow, col = (c % kChunksPerRow) * kPerChunk;
      const bool valid = row0 + r < nrows;
      const E* src = valid ? gmem + int64_t(row0 + r) * ld + col : gmem;
      cp_async_16(smem + tile_off<kCols + 8>(smem, r, col), src, valid);
    }
  }
}

}  // namespace trainer::flash
