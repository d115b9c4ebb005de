// Tensor memory accelerator (TMA, sm_90) loads of the Hopper kernels (FlashAttention, dw_adamw): the host encodes a
// tensor map of a strided [B, T, H, d] bf16 view (a [rows, columns] matrix: B = H = 1) with cuTensorMapEncodeTiled,
// reached through the runtime's driver entry point, so no libcuda link; one thread copies a box of rows x 64 columns
// into a 128B-swizzled shared sub-tile (the layout of wgmma.cuh), completing on an mbarrier (barriers.cuh) by
// transaction bytes. Rows past T are zero-filled by the hardware. Also unswizzled fp32 boxes of a matrix (dw_adamw's
// epilogue operands). (A load multicast to a cluster's CTAs and the remote mbarrier arrive were the 33rd-35th
// sessions' DWA_CLUSTER_PAIR experiment: exact, no faster; git history, kernels/dw_adamw/NOTES.md.)
// PTX ISA 8.x: "cp.async.bulk.tensor"; CUDA driver API: cuTensorMapEncodeTiled.
#pragma once
#include "common.cuh"

#include <cuda.h>  // CUtensorMap (types only)
#include <cudaTypedefs.h>

#include "sm90/barriers.cuh"

namespace trainer::sm90 {

/// The driver's cuTensorMapEncodeTiled, reached once through the runtime (no libcuda link).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || fn == nullptr)
      fatal("CUDA", "cudaGetDriverEntryPointByVersion", __FILE__, __LINE__, "the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

/// cuTensorMapEncodeTiled with the options every map here uses (no interleave, L2 promotion 256 B, out-of-bounds
/// elements read as zero; element strides 1; 128-byte swizzle unless `swizzle` says otherwise). Aborts
/// (trainer::fatal) naming the view (`what()`) when the driver refuses it.
template <class What>
inline CUtensorMap encode_tiled(CUtensorMapDataType dtype, cuuint32_t rank, const void* base, const cuuint64_t* dims,
                                const cuuint64_t* strides, const cuuint32_t* box, What what,
                                CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  CUtensorMap map{};
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(&map, dtype, rank, const_cast<void*>(base), dims, strides, box,
                                          elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fatal("CUDA", "cuTensorMapEncodeTiled", __FILE__, __LINE__, fmt::format("error {} for {}", int(r), what()));
  return map;
}

/// Tensor map of a [B, T, H, d] bf16 view (strides in elements, d contiguous): dims (d, T, H, B), box (64, box_rows,
/// 1, 1), 128-byte swizzle. Aborts (trainer::fatal) when the driver refuses it (base not 16-byte aligned, strides
/// not multiples of 8 elements, T or B beyond 2^32).
inline CUtensorMap encode_tma_bf16(const void* base, int B, int T, int H, int d, int64_t batch_stride,
                                   int64_t row_stride, int64_t head_stride, int box_rows) {
  const cuuint64_t dims[4] = {cuuint64_t(d), cuuint64_t(T), cuuint64_t(H), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(row_stride) * 2, cuuint64_t(head_stride) * 2, cuuint64_t(batch_stride) * 2};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  return encode_tiled(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, dims, strides, box, [&] {
    return fmt::format("the [B {}, T {}, H {}, d {}] view with strides {} / {} / {}", B, T, H, d, batch_stride,
                       row_stride, head_stride);
  });
}

/// Tensor map of an fp32 [rows, cols] matrix (row stride in elements, a multiple of 4; base 16-byte aligned): box of
/// box_rows x box_cols (box_cols a multiple of 4, at most 256), no swizzle: element (r, c) of a box lands at byte
/// (r * box_cols + c) * 4. Aborts (trainer::fatal) when refused.
inline CUtensorMap encode_tma_f32_2d(const void* base, int64_t rows, int64_t cols, int64_t row_stride, int box_rows,
                                     int box_cols) {
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_stride) * 4};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  return encode_tiled(
      CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, strides, box,
      [&] { return fmt::format("the fp32 [{}, {}] matrix with row stride {}", rows, cols, row_stride); },
      CU_TENSOR_MAP_SWIZZLE_NONE);
}

#ifdef __CUDACC__
/// The box at (column c0, row c1, head c2, batch c3) of `map` into the 1024-byte aligned shared sub-tile `smem`;
/// completes `bytes` (the box size) on the mbarrier `bar`. One thread.
__device__ __forceinline__ void tma_load_4d(void* smem, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                           uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(smem_addr(smem)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}
/// The box at (column c0, row c1) of a 2-D `map` into the 1024-byte aligned shared `smem`; completes the box's bytes
/// on the mbarrier `bar` (rows and columns past the matrix are zero-filled and counted). One thread.
__device__ __forceinline__ void tma_load_2d(void* smem, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(smem_addr(smem)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
#endif

}  // namespace trainer::sm90
