// CpuBackend: the fp32 reference backend. Host memory (64-byte aligned), ops run at once on the calling thread
// (matmuls on OpenBLAS's threads), events are steady_clock readings. Every op is the float instantiation of the
// templates in cpu_ops.h, which hold the formulas and their sources.
//
// Supported dtypes: f32 activations, i32 tokens and targets, and bf16 storage for parameters, gradients and AdamW
// moments (pure-bf16 training, emulated: bf16 values are converted to fp32 exactly, computed on in fp32, and results
// rounded to nearest even once per element per call, backend/bf16.h). bf16 is accepted by: matmul (any of A, B, C),
// rmsnorm w and dw, embedding table and dtable, adamw (p, g, m, v all bf16), fill, cast, add_inplace, scale, sum,
// sum_squares. bf16 activations are CUDA-only: attention, swiglu, rope, cross_entropy, the activations of rmsnorm
// and embedding, and a non-empty p_work in adamw raise RuntimeError. Shape mismatches raise RuntimeError too
// (TRAINER_CHECK): they are programming errors, not user input.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"

namespace trainer {

class CpuBackend final : public Backend {
 public:
  CpuBackend() = default;
  Device device() const override { return Device::cpu; }
  std::string name() const override { return "cpu"; }
  /// "CPU (OpenBLAS 0.3.21, 2 threads)".
  std::string description() const override;

  // ---- memory ------------------------------------------------------------------------------------------------
  void* raw_alloc(size_t bytes) override;  // aligned_alloc(64, bytes rounded up to 64); nullptr on failure
  void raw_free(void* p) override;
  void copy_from_host(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill(Tensor t, float value) override;  // f32, f64, i32 or bf16 (value converted; bf16 to nearest even)
  void synchronize() override {}

  // ---- timing ------------------------------------------------------------------------------------------------
  std::unique_ptr<Event> make_event() override;
  void record(Event& e) override;
  float elapsed_ms(Event& start, Event& end) override;

  // ---- ops ---------------------------------------------------------------------------------------------------
  void matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
              float beta) override;
  void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) override;
  void embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) override;
  void rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dw = true) override;
  void rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) override;
  /// naive: cpu::attention_naive_fwd (probs required); flash2: cpu::attention_flash2_fwd, tiles kFlashTile^2
  /// (probs ignored).
  void attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                     const Tensor& qkv) override;
  /// naive reads probs; flash2 reads out and lse.
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
  /// Same-dtype copy (f32, f64, i32, bf16) or f32 <-> bf16 (round to nearest even).
  void cast(Tensor dst, const Tensor& src) override;
  /// fp32 (cpu::adamw<float>) or bf16 storage (cpu::adamw_bf16); p_work must be empty (working copies exist only
  /// on CUDA).
  double adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) override;

  /// FlashAttention-2 reference tile (queries x keys), as the CUDA kernel's 64 x 64 for d_head 64.
  static constexpr int kFlashTile = 64;
};

}  // namespace trainer
