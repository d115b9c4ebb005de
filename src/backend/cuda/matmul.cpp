// cuBLASLt products for the CUDA backend (cuBLAS docs, "cublasLtMatmul()" and "Using the cuBLASLt API"; llm.c
// `llmc/matmul.cuh` matmul_cublaslt for the descriptor/heuristic sequence).
//
// Row-major to column-major: a row-major X [r, c] with row stride ld is, read column-major, Xᵀ [c, r] with leading
// dimension ld. So row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLASLt's first operand is our
// B, its second our A, m = N, n = M, k = K, and each transpose flag carries over unchanged:
//   B not transposed: stored [K, N] row-major = column-major [N, K] = op(B)ᵀ -> OP_N, layout rows N, cols K, ld ldb
//   B transposed:     stored [N, K] row-major = column-major [K, N]         -> OP_T, layout rows K, cols N, ld ldb
//   (A alike, with M in place of N), and C: column-major [N, M], ld ldc.
#include "backend/cuda/matmul.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common.cuh"  // CUDA_CHECK
#include "core/errors.h"

#define CUBLAS_CHECK(expr) TRAINER_CHECK_LIB(expr, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString, "cuBLASLt")

namespace trainer {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    default: TRAINER_CHECK(false, "matmul: dtype {} is not f32 or bf16", dtype_name(t));
  }
  return CUDA_R_32F;
}

/// Largest power of two <= 16 dividing the address of every batch entry (base + i * stride_bytes).
uint8_t alignment(const void* p, int64_t stride_bytes, int batch) {
  uintptr_t bits = reinterpret_cast<uintptr_t>(p) | 16u;
  if (batch > 1) bits |= uintptr_t(stride_bytes);
  return uint8_t(bits & (~bits + 1));  // lowest set bit
}

}  // namespace

bool CublasLtMatmul::Key::operator==(const Key& o) const {
  const GemmShape& x = g;
  const GemmShape& y = o.g;
  return x.M == y.M && x.N == y.N && x.K == y.K && x.trans_a == y.trans_a && x.trans_b == y.trans_b &&
         x.ab == y.ab && x.c == y.c && x.lda == y.lda && x.ldb == y.ldb && x.ldc == y.ldc && x.batch == y.batch &&
         x.stride_a == y.stride_a && x.stride_b == y.stride_b && x.stride_c == y.stride_c && x.tf32 == y.tf32 &&
         align_a == o.align_a &&
         align_b == o.align_b && align_c == o.align_c;
}

size_t CublasLtMatmul::KeyHash::operator()(const Key& k) const {
  size_t h = 0;
  auto mix = [&h](uint64_t v) { h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  const GemmShape& g = k.g;
  for (int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.stride_a, g.stride_b, g.stride_c}) mix(uint64_t(v));
  mix(uint64_t(g.batch));
  mix(uint64_t(g.trans_a) | uint64_t(g.trans_b) << 1 | uint64_t(g.ab) << 2 | uint64_t(g.c) << 6 |
      uint64_t(k.align_a) << 10 | uint64_t(k.align_b) << 18 | uint64_t(k.align_c) << 26 | uint64_t(g.tf32) << 34);
  return h;
}

int64_t span_a(const GemmShape& g) {
  const int64_t rows = g.trans_a ? g.K : g.M, cols = g.trans_a ? g.M : g.K;
  return int64_t(g.batch - 1) * g.stride_a + (rows - 1) * g.lda + cols;
}
int64_t span_b(const GemmShape& g) {
  const int64_t rows = g.trans_b ? g.N : g.K, cols = g.trans_b ? g.K : g.N;
  return int64_t(g.batch - 1) * g.stride_b + (rows - 1) * g.ldb + cols;
}

CublasLtMatmul::CublasLtMatmul(void* workspace, size_t workspace_bytes, bool autotune)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), autotune_(autotune) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLtMatmul::~CublasLtMatmul() {
  for (auto& [key, p] : cache_) destroy_plan(p);
  if (handle_) cublasLtDestroy(handle_);
}

int CublasLtMatmul::fastest(const Key& k, Plan& p, const cublasLtMatmulHeuristicResult_t* cand, int n,
                            const void* A, const void* B, cudaStream_t stream) {
  const GemmShape& g = k.g;
  const size_t c_elems = size_t((g.M - 1) * g.ldc + g.N) + size_t(g.batch - 1) * size_t(g.stride_c);
  void* raw = nullptr;
  if (cudaMalloc(&raw, c_elems * dtype_size(g.c)) != cudaSuccess) {
    (void)cudaGetLastError();  // no room for a temporary C: keep the heuristic's choice
    return -1;
  }
  // Owned for the whole timing, also when a check throws (cudaFree waits for the queued products).
  const std::unique_ptr<void, decltype(&cudaFree)> C(raw, &cudaFree);
  cudaEvent_t events[2] = {nullptr, nullptr};
  const auto destroy = [](cudaEvent_t* e) {
    for (int i = 0; i < 2; ++i)
      if (e[i]) cudaEventDestroy(e[i]);
  };
  const std::unique_ptr<cudaEvent_t, decltype(destroy)> own_events(events, destroy);
  CUDA_CHECK(cudaEventCreate(&events[0]));
  CUDA_CHECK(cudaEventCreate(&events[1]));
  CUDA_CHECK(cudaStreamSynchronize(stream));  // every candidate starts on an idle stream
  const float alpha = 1.f, beta = 0.f;
  // Repetitions: about 2 ms of work per candidate, at least 3 and at most 20 calls (estimated at 500 TFLOP/s).
  const double flops = 2.0 * double(g.M) * double(g.N) * double(g.K) * g.batch;
  const int reps = int(std::clamp(2e-3 * 500e12 / std::max(flops, 1.0), 3.0, 20.0));
  std::vector<float> ms(size_t(n), -1.f);  // per call; -1: not timed
  for (int i = 0; i < n; ++i) {
    if (cand[i].state != CUBLAS_STATUS_SUCCESS) continue;
    auto run = [&] {
      return cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C.get(), p.c, C.get(), p.c, &cand[i].algo,
                            workspace_, workspace_bytes_, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // a candidate that does not launch is skipped (the call warms up)
    CUDA_CHECK(cudaEventRecord(events[0], stream));
    for (int r = 0; r < reps; ++r) CUBLAS_CHECK(run());
    CUDA_CHECK(cudaEventRecord(events[1], stream));
    CUDA_CHECK(cudaEventSynchronize(events[1]));
    CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(i)], events[0], events[1]));
    ms[size_t(i)] /= float(reps);
  }
  // The heuristic's first choice stays unless another is at least 3% faster: near-ties are timing noise, and
  // switching on noise would only make runs pick different algorithms.
  int best = ms[0] >= 0 ? 0 : -1;
  for (int i = 1; i < n; ++i)
    if (ms[size_t(i)] >= 0 && (best < 0 || ms[size_t(i)] < (best == 0 ? 0.97f : 1.f) * ms[size_t(best)])) best = i;
  if (best >= 0) {
    tuning_.shapes += 1;
    tuning_.changed += best != 0;
    tuning_.heuristic_ms += ms[0] >= 0 ? ms[0] : ms[size_t(best)];
    tuning_.tuned_ms += ms[size_t(best)];
  }
  return best;
}

void CublasLtMatmul::destroy_plan(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = Plan{};
}

CublasLtMatmul::Plan CublasLtMatmul::make_plan(const Key& k, const void* A, const void* B, cudaStream_t stream) {
  Plan p;
  try {
    fill_plan(k, p, A, B, stream);
  } catch (...) {  // nothing half-made stays behind
    destroy_plan(p);
    throw;
  }
  return p;
}

void CublasLtMatmul::fill_plan(const Key& k, Plan& p, const void* A, const void* B, cudaStream_t stream) {
  const GemmShape& g = k.g;
  const cublasComputeType_t compute =
      (g.ab == DType::f32 && g.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F));
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   // cuBLASLt "A" = our B
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt "B" = our A
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));

  const cudaDataType_t tab = cuda_type(g.ab), tc = cuda_type(g.c);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, tab, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, tab, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, tc, g.N, g.M, g.ldc));
  if (g.batch > 1) {
    const int32_t count = g.batch;
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {{p.a, g.stride_b}, {p.b, g.stride_a},
                                                                  {p.c, g.stride_c}};
    for (const auto& [layout, stride] : layouts) {
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
      CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                    sizeof(stride)));
    }
  }

  cublasLtMatmulPreference_t raw_pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, decltype(&cublasLtMatmulPreferenceDestroy)> own_pref(
      raw_pref, &cublasLtMatmulPreferenceDestroy);
  const cublasLtMatmulPreference_t pref = raw_pref;
  const uint64_t ws = workspace_bytes_;
  CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_first = k.align_b, al_second = k.align_a, al_c = k.align_c;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_first,
                                                    sizeof(al_first)));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_second,
                                                    sizeof(al_second)));
  CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, autotune_ ? kCandidates : 1,
                                               results, &found));
  if (found == 0)
    fatal("cuBLASLt", "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__,
          fmt::format("no algorithm for C[{},{}] = op(A) op(B), K {}, trans_a {}, trans_b {}, {} x {} -> {}, lda {} "
                      "ldb {} ldc {}, batch {}, alignment {}/{}/{} bytes",
                      g.M, g.N, g.K, g.trans_a, g.trans_b, dtype_name(g.ab), dtype_name(g.ab), dtype_name(g.c), g.lda,
                      g.ldb, g.ldc, g.batch, k.align_a, k.align_b, k.align_c));
  const int best = autotune_ && found > 1 ? fastest(k, p, results, found, A, B, stream) : 0;
  p.algo = results[best >= 0 ? best : 0].algo;
}

void CublasLtMatmul::gemm(const GemmShape& g, void* C, const void* A, const void* B, float alpha, float beta,
                          cudaStream_t stream, const void* C_in) {
  TRAINER_CHECK(g.M > 0 && g.N > 0 && g.K > 0 && g.batch >= 1, "matmul: empty product M {} N {} K {} batch {}", g.M,
                g.N, g.K, g.batch);
  TRAINER_CHECK(g.c == DType::f32 || g.c == g.ab, "matmul: C dtype {} with A/B {}", dtype_name(g.c),
                dtype_name(g.ab));
  const int64_t sab = int64_t(dtype_size(g.ab)), sc = int64_t(dtype_size(g.c));
  uint8_t align_c = alignment(C, g.stride_c * sc, g.batch);
  if (C_in) align_c = std::min(align_c, alignment(C_in, g.stride_c * sc, g.batch));
  Key k{g, alignment(A, g.stride_a * sab, g.batch), alignment(B, g.stride_b * sab, g.batch), align_c};
  TRAINER_CHECK(k.align_a >= sab && k.align_b >= sab && k.align_c >= sc,
                "matmul: operands are not aligned to their element size (A {}, B {}, C {})", A, B, C);
  auto it = cache_.find(k);
  if (it == cache_.end()) it = cache_.emplace(k, make_plan(k, A, B, stream)).first;
  const Plan& p = it->second;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, B, p.a, A, p.b, &beta, C_in ? C_in : C, p.c, C, p.c, &p.algo,
                              workspace_, workspace_bytes_, stream));
}

}  // namespace trainer
