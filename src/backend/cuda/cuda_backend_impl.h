// CudaBackend: the class behind make_cuda_backend (internal to src/backend/cuda/; the rest of the program sees only
// Backend). Ops validate shapes and dtypes on the host (TRAINER_CHECK), then enqueue kernels/ launchers or cuBLASLt
// products on the compute stream. Nothing here synchronises except the ops documented "(syncs)" in backend.h and
// the rare growth of the scratch buffer, with gemm_autotune the first call of each GEMM shape, and an allocation that
// finds the device full (the caching allocator then synchronises and empties its cache).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/matmul.h"
#include "core/caching_allocator.h"

namespace trainer {

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device_index, const BackendOptions& opts);
  ~CudaBackend() override;

  Device device() const override { return Device::cuda; }
  std::string name() const override;
  std::string description() const override;
  GemmTuning gemm_tuning() const override { return blas_ ? blas_->tuning() : GemmTuning{}; }
  size_t device_memory_bytes() const override { return gpu_bytes_; }

  /// Through the caching allocator (core/caching_allocator.h): no cudaMalloc / cudaFree once a step's sizes are
  /// cached, and no synchronisation, as every op runs on the one compute stream.
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override;
  size_t reserved_bytes() const override { return pool_->reserved_bytes(); }
  size_t peak_reserved_bytes() const override { return pool_->peak_reserved_bytes(); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill(Tensor t, float value) override;
  void synchronize() override;
  void* stream() override { return stream_; }

  /// cudaStreamBeginCapture (relaxed mode: cudaMalloc allowed) on the compute stream, the allocator's private blocks
  /// (core/caching_allocator.h) for the capture's allocations, cudaGraphInstantiate + cudaGraphUpload.
  std::unique_ptr<Graph> capture(const std::function<void()>& enqueue) override;

  std::unique_ptr<Event> make_event() override;
  void record(Event& e) override;
  float elapsed_ms(Event& start, Event& end) override;

  void matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
              float beta) override;
  void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) override;
  void embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) override;
  void rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dw = true) override;
  void rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) override;
  void attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                     const Tensor& qkv) override;
  void attention_bwd(AttnImpl impl, const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                     const Tensor& out, const Tensor& lse, const Tensor& probs) override;
  void swiglu_fwd(Tensor g, const Tensor& ab) override;
  void swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g = Tensor()) override;
  void add_inplace(Tensor x, const Tensor& y) override;
  void cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets,
                     float dscale) override;
  double sum(const Tensor& x) override;
  double sum_squares(const Tensor& x) override;
  void clip_factor_to(const Tensor& g, double max_norm, double* sumsq, float* factor) override;
  void scale(Tensor x, float s) override;
  void cast(Tensor dst, const Tensor& src) override;
  double adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) override;
  void matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                       const AdamWArgs& a, Tensor g_buf, bool accumulate) override;

  /// The caching allocator behind raw_alloc (for tests and logs).
  const CachingAllocator& allocator() const { return *pool_; }

 private:
  /// At least `bytes` of device memory (256-byte aligned) for the op being enqueued; valid until the next call.
  /// Stream order makes reuse safe. Grows (synchronising once, then freeing the old block) when too small.
  void* scratch(size_t bytes);
  /// `b` with at least `bytes` (the scratch rule: grown to max(bytes, 1.5x) in whole MiB after a stream
  /// synchronisation, Category::workspace); returns its data.
  void* grown(Buffer& b, size_t bytes);
  double reduce(const Tensor& x, bool square);
  /// Row-major product on the compute stream (see GemmShape); C_in: read in place of C for beta C (null: C). fp32
  /// operands run as opts_.fp32_matmul says; 3xtf32 (the model's matmul / matmul_add, `model_product`): three TF32
  /// products of the split operands (split_) into C. Naive attention's batched products are not split (3xtf32 runs
  /// them IEEE): their operands (all heads' scores) would make the split workspace as large as the scores.
  void gemm(const GemmShape& g, void* C, const void* A, const void* B, float alpha, float beta,
            const void* C_in = nullptr, bool model_product = false);
  /// matmul_add (checked by Backend): R goes in as cuBLASLt's C input, D is the output.
  void matmul_residual(Tensor D, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                       const Tensor& R) override;
  /// Checks C = op(A) op(B) (dtypes, shapes) and returns its GemmShape; K may be 0.
  GemmShape matmul_shape(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b);
  /// flash2 for a d_head that kernels/flash_attn does not cover runs the naive path without stored probs; logs once.
  void note_flash2_fallback(AttnImpl impl, int d_head);

  int device_ = 0;
  BackendOptions opts_;
  std::string gpu_name_;
  size_t gpu_bytes_ = 0;
  int runtime_version_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CachingAllocator> pool_;  // device memory behind raw_alloc; outlives every Buffer member below
  Buffer workspace_;        // cuBLASLt workspace, 32 MiB
  Buffer scratch_;          // per-op temporaries (attention scores, sort keys, partial sums)
  Buffer reduce_partials_;  // fp64 partial sums + the result of sum / sum_squares
  Buffer rope_table_;       // (cos, sin) [T, d_head/2] for rope_key_
  Buffer split_;            // fp32_matmul 3xtf32: hi / lo parts of one product's A and B (cuda_sizes::split_tf32_bytes)
  std::tuple<int, int, float> rope_key_{0, 0, 0.f};  // (T, d_head, theta) of rope_table_
  int live_graphs_ = 0;  // captured graphs not yet destroyed (at most one): workspaces they use must not move
  double* host_result_ = nullptr;  // pinned, 1 double
  std::unique_ptr<CublasLtMatmul> blas_;
  bool flash2_warned_ = false;
};

}  // namespace trainer
