// cuBLASLt matrix products for the CUDA backend: row-major C = alpha op(A) op(B) + beta C, optionally strided-batched,
// with a per-shape cache of the descriptors and the algorithm: the heuristic's first choice, or (autotune) the
// fastest of its candidates timed on the first call of the shape.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "backend/backend.h"
#include "core/tensor.h"

namespace trainer {

/// One row-major product C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C. A is stored [M,K] (or [K,M] when trans_a)
/// with row stride lda elements, B likewise [K,N] (or [N,K]) with ldb, C [M,N] with ldc. `batch` independent
/// products whose operands start stride_* elements apart.
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  DType ab = DType::f32;  // dtype of A and B (f32 or bf16)
  DType c = DType::f32;   // dtype of C (f32, or ab)
  int64_t lda = 0, ldb = 0, ldc = 0;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  bool tf32 = false;  // f32 A / B: one TF32 tensor-core product (CUBLAS_COMPUTE_32F_FAST_TF32), else IEEE fp32
};

/// Elements of A (of B) from the first to the last one the product reads: its [rows, cols] with row stride ld,
/// `batch` of them stride_* apart (a contiguous operand: its numel).
int64_t span_a(const GemmShape& g);
int64_t span_b(const GemmShape& g);

/// Owns a cuBLASLt handle and the cache; the workspace memory belongs to the caller (the backend's 32 MiB buffer).
class CublasLtMatmul {
 public:
  /// autotune: on the first call of a shape, time up to kCandidates heuristic algorithms (beta 0, into a temporary
  /// C from cudaMalloc, so C itself is untouched; the stream is synchronised) and keep the fastest (the heuristic's
  /// first choice unless another is at least 3% faster). Without memory
  /// for the temporary C the heuristic's first choice is kept.
  CublasLtMatmul(void* workspace, size_t workspace_bytes, bool autotune = false);
  ~CublasLtMatmul();
  CublasLtMatmul(const CublasLtMatmul&) = delete;
  CublasLtMatmul& operator=(const CublasLtMatmul&) = delete;

  /// Enqueues the product on `stream`. Pointers need the alignment of their element type (checked); the alignment
  /// they actually have (up to 16 bytes) is part of the cache key, so an algorithm that needs 16-byte operands is
  /// never used on less. fp32 uses CUBLAS_COMPUTE_32F (CUBLAS_COMPUTE_32F_FAST_TF32 when g.tf32); bf16 uses
  /// CUBLAS_COMPUTE_32F (fp32 accumulation) with C bf16 or f32. Aborts (fatal) when cuBLASLt has no algorithm.
  /// C_in (optional): read for beta C_in instead of C (same layout and alignment as C; cuBLASLt's separate C and D),
  /// so D = alpha op(A) op(B) + beta C_in leaves C_in untouched.
  void gemm(const GemmShape& g, void* C, const void* A, const void* B, float alpha, float beta, cudaStream_t stream,
            const void* C_in = nullptr);

  const GemmTuning& tuning() const { return tuning_; }

  static constexpr int kCandidates = 8;  // heuristic algorithms timed per shape when autotuning

 private:
  struct Key {
    GemmShape g;
    uint8_t align_a, align_b, align_c;
    bool operator==(const Key& o) const;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  /// A new plan for k (descriptors, layouts, algorithm); on an error nothing of it stays allocated.
  Plan make_plan(const Key& k, const void* A, const void* B, cudaStream_t stream);
  void fill_plan(const Key& k, Plan& p, const void* A, const void* B, cudaStream_t stream);
  static void destroy_plan(Plan& p);
  /// Index of the fastest of `n` algorithms for plan p (C = A B into a temporary, beta 0; candidate 0, the
  /// heuristic's first choice, unless another is at least 3% faster); -1 when not timed.
  int fastest(const Key& k, Plan& p, const cublasLtMatmulHeuristicResult_t* cand, int n, const void* A, const void* B,
              cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  bool autotune_;
  GemmTuning tuning_;
  std::unordered_map<Key, Plan, KeyHash> cache_;
};

}  // namespace trainer
