// MetaBackend: a Backend that allocates nothing real and runs no op (PyTorch's "meta" device), for the planner's dry
// run (plan/planner.h). Allocations return unique fake addresses (never dereferenced) and are counted in MemoryStats
// as on the target device; every op only accounts its cost: FLOPs, bytes moved and a predicted time
// max(FLOPs / rate, bytes / bandwidth) at the rates of MetaRates. For the cuda target it also makes the CUDA backend's
// own allocations (cuBLASLt workspace, reduction partials, the growable scratch, the RoPE table; sizes from
// backend/cuda_sizes.h), so the peak it sees is the peak a run sees.
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace trainer {

/// A GPU the cuda planner can stand for: its name (--plan --gpu), its memory as cudaGetDeviceProperties reports it
/// (totalGlobalMem) and its HBM bandwidth. The rates of MetaRates are measured on an H200; another GPU of the same
/// chip (an H100 SXM: the same SMs and clocks) gets them with the memory-bound rate scaled by its bandwidth.
struct GpuSpec {
  std::string name;     // "h200", "h100"
  std::string label;    // "H200", "H100 80GB"
  size_t memory_bytes;  // totalGlobalMem
  double hbm_bytes_per_s;
  double dw_adamw_epilogue_exposed;  // the fused dW + AdamW kernel's exposed share of its epilogue, measured (MetaRates)
};
/// The GPUs the planner knows, the H200 (the default) first.
const std::vector<GpuSpec>& known_gpus();
/// The spec named `name`. ConfigError naming the known ones otherwise.
const GpuSpec& gpu_spec(const std::string& name);
/// The known GPU a device of this name (cuda_device_name) is: "h100" for an H100 80GB HBM3 (the SXM card), else
/// "h200" (an H200, and any other GPU, whose rates nobody measured).
std::string gpu_of_device_name(const std::string& device_name);

/// The rates the meta backend predicts time with (per device; see MetaRates::for_target). FLOP/s and bytes/s.
struct MetaRates {
  std::string device;              // "cuda (H200)" or "cpu (nominal)"
  double gemm_bf16 = 0;            // dense bf16 GEMM, already times gemm_efficiency
  double gemm_f32 = 0;             // fp32 GEMM (by fp32_matmul), already times gemm_efficiency
  bool split_fp32_gemm = false;    // fp32_matmul 3xtf32: fp32 products split their operands (workspace, bytes)
  std::string gemm_f32_mode;       // fp32_matmul: "ieee", "tf32" or "3xtf32"
  double gemm_efficiency = 1;      // fraction of the dense peak a training GEMM reaches
  double attention_bf16 = 0;       // flash2 attention, executed FLOPs per second (causal half counted): the
                                   //   mma.sync kernels (forward and backward)
  double attention_bf16_fwd_sm90 = 0;       // the Hopper (wgmma) kernels: forward,
  double attention_bf16_bwd_sm90 = 0;       //   backward at d 64 / 80
  double attention_bf16_bwd_sm90_d128 = 0;  //   backward at d 128
  // The Hopper rates above are those at T = sm90_rate_seq_len; a sequence of T keys runs at that rate times
  // sm90_seq_len_factor(T, t0): a fixed cost a query tile (prologue, epilogue, wave tails) over T / 128 key tiles.
  double sm90_rate_seq_len = 16384;
  double attention_sm90_fwd_t0 = 0;  // t0 of the forward, keys
  double attention_sm90_bwd_t0 = 0;  // t0 of the backward, keys
  double attention_det_bwd_t0 = 0;   // t0 of the deterministic bf16 backward on the mma.sync kernels (dK/dV pass,
                                     //   dQ pass; head dims without a Hopper kernel) on attention_bf16, the same form
  double attention_det_bwd_sm90 = 1;  // the deterministic Hopper backward's time over the default one's (its dQ
                                      //   contributions in key-tile order: the waits)
  double attention_f32 = 0;
  double memory_bandwidth = 0;     // bytes read + written per second
  double dw_adamw_gemm = 0;        // the fused dW + AdamW kernel's product (kernels/dw_adamw), FLOPs per second; its
                                   //   epilogue's bytes follow it, dw_adamw_epilogue_exposed of their time added
  double dw_adamw_epilogue_exposed = 1.0;
  std::string source;              // where the numbers come from
  /// H200 figures (shared/ANCHORS.md) for Device::cuda (another `gpu`: memory_bandwidth scaled by its HBM bandwidth
  /// against the H200's), nominal CPU figures for Device::cpu.
  static MetaRates for_target(Device d, Fp32Matmul fp32_matmul, const std::string& gpu = "h200");
  /// The Hopper attention rate's factor at `seq_len` keys: seq_len (L + t0) / (L (seq_len + t0)) with L =
  /// sm90_rate_seq_len, at most 1 (1 at L; t0 = 0: always 1).
  double sm90_seq_len_factor(int64_t seq_len, double t0) const;
};

/// What the dry run's ops cost, summed.
struct MetaCost {
  double flops = 0;               // model FLOPs enqueued (matmuls 2MNK; attention as forward_flops_per_token counts
                                  // it: 4·B·T²·D forward, twice that backward), recompute included
  double executed_flops = 0;      // FLOPs the kernels execute (causal flash attention halves, its backward 2.5x)
  double bytes = 0;               // bytes read + written by the ops
  double compute_s = 0;           // predicted time of the ops bound by FLOPs
  double memory_s = 0;            // predicted time of the ops bound by bytes
  double comm_wait_s = 0;         // time the compute stream waits for collectives (wait_until): exposed communication
  int64_t ops = 0;
};

class MetaBackend final : public Backend {
 public:
  /// A meta backend standing in for `target` (device() returns it, so tensors look as in a run) with `opts` (those
  /// that change bytes or rates: fp32_matmul, deterministic); `gpu` (known_gpus) picks the cuda rates.
  explicit MetaBackend(Device target, const BackendOptions& opts = {}, const std::string& gpu = "h200");
  ~MetaBackend() override;
  Device device() const override { return target_; }
  std::string name() const override { return target_ == Device::cuda ? "meta:cuda" : "meta:cpu"; }
  std::string description() const override;

  const MetaCost& cost() const { return cost_; }
  const MetaRates& rates() const { return rates_; }
  void reset_cost() { cost_ = {}; }
  /// The compute stream's predicted clock, seconds since reset_cost(): its ops in sequence plus its waits for
  /// collectives. A MetaCommunicator places collectives on this timeline (dist/meta_communicator.h).
  double now() const { return cost_.compute_s + cost_.memory_s + cost_.comm_wait_s; }
  /// The stream waits until `t` (a collective's predicted end, seconds on now()'s clock): comm_wait_s grows by the
  /// part of t - now() that is positive.
  void wait_until(double t) { cost_.comm_wait_s += std::max(0.0, t - now()); }
  /// Highest total bytes in use seen in each phase (MemoryStats::phase names), op by op.
  const std::map<std::string, size_t>& phase_high_water() const { return phase_high_; }

  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override {}
  void copy_from_host(void* dst, const void* src, size_t bytes) override {}  // reads nothing: the planner passes
                                                                             // no host batch (make_plan)
  void copy_to_host(void* dst, const void* src, size_t bytes) override {}
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill(Tensor t, float value) override;
  void synchronize() override {}
  std::unique_ptr<Event> make_event() override;
  void record(Event& e) override {}
  float elapsed_ms(Event& start, Event& end) override { return 0.f; }

  void matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
              float beta) override;
  void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) override;
  void embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) override;
  void rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                   bool accumulate_dw = true) override;
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
  double sum(const Tensor& x) override;          // 0
  double sum_squares(const Tensor& x) override;  // 0
  void clip_factor_to(const Tensor& g, double max_norm, double* sumsq, float* factor) override;  // writes nothing
  void scale(Tensor x, float s) override;
  void cast(Tensor dst, const Tensor& src) override;
  double adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) override;
  /// cuda with bf16 dY, X and f32 state: as the fused kernel (no temporary gradient; its FLOPs and its 26 bytes a
  /// parameter in one op, which then takes the longer of the two); otherwise the default (product, then adamw). A
  /// run that falls back (not an sm_90 GPU, a shape dw_adamw_supported refuses) has one matrix's temporary more (none
  /// with g_buf: the product goes into it) and the unfused time: the plan assumes the Hopper target.
  void matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                       const AdamWArgs& a, Tensor g_buf, bool accumulate) override;

 private:
  /// One op: model FLOPs, executed FLOPs at `rate` FLOP/s, bytes moved beside them (the op takes the slower of the
  /// two) and `bytes_after`, moved once they are done (a fused epilogue's traffic: `after_exposed` of their time at
  /// the memory rate is added, the rest runs under the products).
  void account(double flops, double executed, double rate, double bytes, double bytes_after = 0,
               double after_exposed = 1.0);
  void touch();                  // records the current total in the phase's high-water mark
  void scratch(size_t bytes);    // cuda target: the CUDA backend's growable scratch (cuda_sizes::scratch_grown)
  void grow(Buffer& b, size_t bytes);  // cuda target: `b` grown by the scratch rule (CudaBackend::grown)
  bool cuda() const { return target_ == Device::cuda; }

  Device target_;
  bool deterministic_;  // BackendOptions::deterministic: the flash backward's dQ in key-tile order (Hopper) or its
                        // dQ pass (mma.sync), instead of atomic adds in any order
  MetaRates rates_;
  MetaCost cost_;
  uintptr_t next_ = uintptr_t(1) << 46;  // fake addresses: far from any real mapping, 256-byte steps
  std::map<std::string, size_t> phase_high_;
  Buffer workspace_, reduce_partials_, scratch_, rope_table_, split_;  // cuda target: the CUDA backend's own allocations
  int rope_T_ = 0, rope_d_ = 0;
};

}  // namespace trainer
