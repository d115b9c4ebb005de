#include "backend/meta/meta_backend.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda_sizes.h"
#include "core/errors.h"

namespace trainer {

namespace {
struct MetaEvent final : Event {};
double b(const Tensor& t) { return double(t.bytes()); }
}  // namespace

const std::vector<GpuSpec>& known_gpus() {
  // HBM: the H200's 4.8 TB/s (HBM3e), the H100 SXM's 3.35 (HBM3). Memory: what cudaGetDeviceProperties reported on
  // the lent machines (H200: 143156 MiB = 139.8 GiB; H100 80GB HBM3: 85017493504 bytes = 79.18 GiB, the PyTorch
  // peer's gpu_memory_bytes in results/h100/2026-12-05/v31/call1/torch_xl.json).
  // dw_adamw_epilogue_exposed: see MetaRates::for_target (v34 on the H200, v33 on the H100).
  static const std::vector<GpuSpec> gpus = {{"h200", "H200", size_t(143156) << 20, 4.8e12, 0.84},
                                            {"h100", "H100 80GB", size_t(85017493504ull), 3.35e12, 0.71}};
  return gpus;
}

const GpuSpec& gpu_spec(const std::string& name) {
  std::string names;
  for (const GpuSpec& g : known_gpus()) {
    if (g.name == name) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw ConfigError(fmt::format("unknown GPU '{}' (known: {})", name, names));
}

std::string gpu_of_device_name(const std::string& device_name) {
  return device_name.find("H100 80GB HBM3") != std::string::npos ? "h100" : "h200";
}

MetaRates MetaRates::for_target(Device d, Fp32Matmul fp32_matmul, const std::string& gpu) {
  MetaRates r;
  if (d == Device::cuda) {
    // One H200 (shared/ANCHORS.md, 2026-11-29): bf16 GEMM 8192^3 756 TFLOP/s, fp32 GEMM 51 (TF32: about 378, half
    // the bf16 rate), device copy 4.2 TB/s. The training GEMMs of xl and the 8B model ran at 650-700 TFLOP/s
    // (results/NOTES.md v0-v3). Flash attention, executed (causal) FLOPs: the Hopper kernels (d 64 / 80 / 96 / 128)
    // forward 474-577 and backward ~390-450 TFLOP/s at T 16384 (kernels/flash_attn/NOTES.md, v7 and v10; the d 128
    // backward 474-510: the 8B proxy's 46.4 ms a block and 16 x 128 at T 16384, results/NOTES.md v11); the
    // mma.sync kernels (other head dims, fp32 inputs, few tiles) fitted to the xl ctx 16384 / 32768 steps of v8, when
    // d 80 still ran them (results/NOTES.md v9).
    r.device = "cuda (H200)";
    r.gemm_efficiency = 0.88;
    r.gemm_bf16 = 756e12 * r.gemm_efficiency;
    // fp32: IEEE 51, TF32 378; 3xTF32 (three TF32 products; the split passes are counted as bytes) 108, fitted to
    // the xl fp32 step at ctx 512 (544 ms, results/NOTES.md v11): below a third of 378, its products run at ~325.
    r.gemm_f32 = (fp32_matmul == Fp32Matmul::ieee ? 51e12 : (fp32_matmul == Fp32Matmul::tf32 ? 378e12 : 108e12)) *
                 r.gemm_efficiency;
    r.split_fp32_gemm = fp32_matmul == Fp32Matmul::split3;
    r.gemm_f32_mode = fp32_matmul == Fp32Matmul::ieee ? "ieee" : (fp32_matmul == Fp32Matmul::tf32 ? "tf32" : "3xtf32");
    r.attention_bf16 = 215e12;
    r.attention_bf16_fwd_sm90 = 540e12;
    r.attention_bf16_bwd_sm90 = 400e12;
    r.attention_bf16_bwd_sm90_d128 = 480e12;
    // Shorter sequences run slower (v22 rounds, results/h200/2026-12-03/v22/call2: xl's 4 x 32 x 80 causal, forward
    // 104 / 352-367 / 491-505 TFLOP/s at T 512 / 2048 / 16384, backward 114 / 277 / 380; small's 4 x 12 x 64 at T
    // 4096 forward 369): t0 fitted to T 512 and 16384 (the factor gives forward 112 / 290 at T 512 / 2048, backward
    // 120 / 262 at these rates).
    r.attention_sm90_fwd_t0 = 2300;
    r.attention_sm90_bwd_t0 = 1330;
    // deterministic's backward on the mma.sync kernels (d_head 16 / 32 since v48; until then every head dim) at xl's
    // T 512: 0.202 ms a call on an H100 (results/h100/2026-12-07/v47/call2, traced), 93 TFLOP/s of its 3.5x the
    // forward's executed FLOPs: t0 fitted to that point and attention_bf16 at T 16384
    r.attention_det_bwd_t0 = 724;
    // deterministic on the Hopper backward (its dQ contributions in key-tile order), over the default, one H100 in
    // rounds alternating the two (results/h100/2026-12-07/v48/call2): 16 heads T 16384 causal d 64 1.040, d 128
    // 1.033, d 64 non-causal 1.013; xl's 4 x 32 x 80 T 512 1.033 (1.016 traced in the step, call1), T 2048 1.039.
    // small's 4 x 12 x 64 at T 512 (few query tiles a CTA and one dQ stage: each wait for a turn stalls the
    // consumers) 1.138: there the mode costs ~0.07 ms of the 5.7 ms step, modelled ~0.02
    r.attention_det_bwd_sm90 = 1.04;
    r.attention_f32 = 100e12;  // flash2 fp32 runs as 3xTF32: assumed ~1/4 of the bf16 kernel
    r.memory_bandwidth = 4.2e12;
    // The fused dW + AdamW kernel's product runs at 0.83 of cuBLASLt's on an H200 (an xl block's four products 0.70
    // against 0.58 ms, results/NOTES.md v28; 0.79 on an H100: 0.757 against 0.595, v31), and its time is that
    // product's plus a fraction of its epilogue's bytes at this model's memory rate, measured per GPU with v33's
    // epilogue chunks of 16 x 128 (GpuSpec): on the H200 0.84 (v34: an xl block 1.267 ms = 0.724 + 0.543, where 26
    // bytes x 104.9M weights at 4.2 TB/s take 0.649), on the H100 0.71 (v33: 1.409 = 0.751 + 0.658 of 0.932).
    r.dw_adamw_gemm = 0.83 * r.gemm_bf16;
    r.source = "H200 measurements in shared/ANCHORS.md (GEMM peaks times gemm_efficiency; attention fp32 assumed)";
    const GpuSpec& spec = gpu_spec(gpu);
    r.dw_adamw_epilogue_exposed = spec.dw_adamw_epilogue_exposed;
    if (spec.name != "h200") {  // the same chip: the H200's compute rates, the bytes at this GPU's bandwidth
      const GpuSpec& h200 = known_gpus().front();
      r.memory_bandwidth *= spec.hbm_bytes_per_s / h200.hbm_bytes_per_s;
      r.device = fmt::format("cuda ({})", spec.label);
      r.source += fmt::format("; {}: the memory-bound rate times {:.2f} / {:.2f} TB/s (HBM), the compute rates the "
                              "H200's", spec.label, spec.hbm_bytes_per_s / 1e12, h200.hbm_bytes_per_s / 1e12);
    }
  } else {
    r.device = "cpu (nominal)";
    r.gemm_efficiency = 1;
    r.gemm_bf16 = r.gemm_f32 = 50e9;  // OpenBLAS sgemm on a few cores: nominal
    r.attention_bf16 = r.attention_f32 = r.attention_bf16_fwd_sm90 = r.attention_bf16_bwd_sm90 =
        r.attention_bf16_bwd_sm90_d128 = 10e9;
    r.memory_bandwidth = 10e9;
    r.source = "nominal figures for a small multi-core CPU (not measured)";
  }
  return r;
}

double MetaRates::sm90_seq_len_factor(int64_t seq_len, double t0) const {
  const double T = double(seq_len), L = sm90_rate_seq_len;
  return t0 <= 0 || T >= L ? 1.0 : T * (L + t0) / (L * (T + t0));
}

MetaBackend::MetaBackend(Device target, const BackendOptions& opts, const std::string& gpu)
    : target_(target), deterministic_(opts.deterministic && target == Device::cuda),  // (the cpu backend ignores it)
      rates_(MetaRates::for_target(target, opts.fp32_matmul, gpu)) {
  if (cuda()) {  // what CudaBackend allocates at construction (cuda_backend.cpp)
    workspace_ = alloc(cuda_sizes::kCublasWorkspaceBytes, Category::workspace);
    reduce_partials_ = alloc(cuda_sizes::reduce_partials_bytes(), Category::workspace);
  }
}

MetaBackend::~MetaBackend() = default;

std::string MetaBackend::description() const {
  return fmt::format("meta backend for {} (allocates nothing, runs nothing)", rates_.device);
}

void* MetaBackend::raw_alloc(size_t bytes) {
  const uintptr_t p = next_;
  next_ += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  auto& hw = phase_high_[stats_.phase ? stats_.phase : "setup"];
  hw = std::max(hw, stats_.total + bytes);  // Buffer counts this allocation right after
  return reinterpret_cast<void*>(p);
}

void MetaBackend::touch() {
  auto& hw = phase_high_[stats_.phase ? stats_.phase : "setup"];
  hw = std::max(hw, stats_.total);
}

void MetaBackend::account(double flops, double executed, double rate, double bytes, double bytes_after,
                          double after_exposed) {
  touch();
  cost_.flops += flops;
  cost_.executed_flops += executed;
  cost_.bytes += bytes + bytes_after;
  cost_.ops += 1;
  const double tc = rate > 0 ? executed / rate : 0, tm = bytes / rates_.memory_bandwidth;
  if (tc >= tm) cost_.compute_s += tc;
  else cost_.memory_s += tm;
  cost_.memory_s += after_exposed * bytes_after / rates_.memory_bandwidth;
}

void MetaBackend::grow(Buffer& b, size_t bytes) {
  if (!cuda() || bytes <= b.bytes()) return;
  const size_t want = cuda_sizes::scratch_grown(b.bytes(), bytes);
  b.reset();
  b = alloc(want, Category::workspace);
}

void MetaBackend::scratch(size_t bytes) { grow(scratch_, bytes); }

std::unique_ptr<Event> MetaBackend::make_event() { return std::make_unique<MetaEvent>(); }

void MetaBackend::copy(void*, const void*, size_t bytes) { account(0, 0, 0, 2.0 * double(bytes)); }
void MetaBackend::fill(Tensor t, float) { account(0, 0, 0, b(t)); }

void MetaBackend::matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool, float, float beta) {
  const double M = double(C.rows()), N = double(C.cols()), K = double(trans_a ? A.rows() : A.cols());
  const double f = 2 * M * N * K;
  double split_reads = 0;  // 3xTF32: the products read the parts (two more reads of A and B)
  if (cuda() && rates_.split_fp32_gemm && A.dtype == DType::f32) {
    account(0, 0, 0, 3 * (b(A) + b(B)));  // the split passes: read A and B, write their high and low parts
    split_reads = 2 * (b(A) + b(B));
    grow(split_, cuda_sizes::split_tf32_bytes(A.numel(), B.numel()));  // as CudaBackend::gemm's split_
  }
  // An accumulating product (beta != 0: a dW summed over microbatches or LM-head chunks) reads and writes its sum
  // once more, and that traffic is not hidden under the product: the 8B proxy's head in 10 chunks of 3328 tokens took
  // ~10.5 ms more than the whole head (results/NOTES.md v11, call5: 688.4 / 682.6 against 676.8 / 673.2 ms), 9 x 2 x
  // 2.49 GB of fp32 dW at 4.2 TB/s = 10.7 ms. A product that writes C once has that write in gemm_efficiency.
  const bool accumulate = beta != 0.f;
  account(f, f, A.dtype == DType::bf16 ? rates_.gemm_bf16 : rates_.gemm_f32,
          b(A) + b(B) + (accumulate ? 0 : b(C)) + split_reads, accumulate ? 2 * b(C) : 0);
}

void MetaBackend::embedding_fwd(Tensor out, const Tensor& tokens, const Tensor&) {
  account(0, 0, 0, 2 * b(out) + b(tokens));
}

void MetaBackend::embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) {
  scratch(cuda_sizes::embedding_bwd_scratch_bytes_approx(tokens.numel()));
  // dtable rows read + written
  account(0, 0, 0, b(dout) + 2.0 * double(dout.numel()) * double(dtype_size(dtable.dtype)) + 4 * b(tokens));
}

void MetaBackend::rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float) {
  account(0, 0, 0, b(x) + b(y) + b(w) + b(rstd));
}

void MetaBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& rstd, bool) {
  scratch(cuda_sizes::rmsnorm_bwd_scratch_bytes(x.rows(), int(x.cols())));
  account(0, 0, 0, b(dy) + b(x) + 2 * b(dx) + b(w) + b(rstd) + 2 * b(dw));
}

void MetaBackend::rope(Tensor qkv, const AttnShape& s, float, bool) {
  if (cuda() && (!rope_table_ || rope_T_ != s.T || rope_d_ != s.d_head)) {  // one table per (T, d_head)
    rope_table_.reset();
    rope_table_ = alloc(cuda_sizes::rope_table_bytes(s.T, s.d_head), Category::workspace);
    rope_T_ = s.T;
    rope_d_ = s.d_head;
  }
  account(0, 0, 0, 2.0 * b(qkv) * 2 / 3);  // q and k read and written
}

namespace {
/// Model FLOPs of one attention forward (forward_flops_per_token's convention: S = QKᵀ and P·V in full).
double attn_model_flops(const AttnShape& s) { return 4.0 * s.B * double(s.T) * s.T * double(s.H) * s.d_head; }
}  // namespace

void MetaBackend::attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                                const Tensor& qkv) {
  const double f = attn_model_flops(s);
  const bool flash = impl == AttnImpl::flash2 && (!cuda() || cuda_sizes::flash_supports_head_dim(s.d_head));
  if (flash) {  // flash2: the causal mask skips half the tiles
    if (cuda()) scratch(cuda_sizes::flash_fwd_workspace_bytes_h200(s, qkv.dtype));
    const double sm90_fwd =
        rates_.attention_bf16_fwd_sm90 * rates_.sm90_seq_len_factor(s.T, rates_.attention_sm90_fwd_t0);
    const double rate = cuda_sizes::flash_fwd_uses_hopper_h200(s, qkv.dtype) ? sm90_fwd
                        : qkv.dtype == DType::bf16                          ? rates_.attention_bf16
                                                                            : rates_.attention_f32;
    account(f, s.causal ? f / 2 : f, rate, b(qkv) + b(out) + b(lse));
  } else {  // naive: full scores through GEMMs, probabilities written
    if (cuda()) scratch(cuda_sizes::naive_attention_fwd_scratch_bytes(s, qkv.dtype, probs.data != nullptr));
    const double tt = double(s.B) * s.H * double(s.T) * s.T;
    account(f, f, qkv.dtype == DType::bf16 ? rates_.gemm_bf16 : rates_.gemm_f32,
            b(qkv) + b(out) + b(lse) + tt * (4 + 2 * double(dtype_size(qkv.dtype))));
  }
}

void MetaBackend::attention_bwd(AttnImpl impl, const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, const Tensor& probs) {
  const double f = 2 * attn_model_flops(s);
  const bool flash = impl == AttnImpl::flash2 && (!cuda() || cuda_sizes::flash_supports_head_dim(s.d_head));
  if (flash) {  // recomputes S and P: 2.5x the forward's executed FLOPs (5 products against its 2)
    if (cuda()) scratch(cuda_sizes::flash_bwd_workspace_bytes_h200(s, qkv.dtype, deterministic_));
    const double fwd_exec = s.causal ? f / 4 : f / 2;
    const double sm90_bwd = (s.d_head == 128 ? rates_.attention_bf16_bwd_sm90_d128 : rates_.attention_bf16_bwd_sm90) *
                            rates_.sm90_seq_len_factor(s.T, rates_.attention_sm90_bwd_t0);
    if (cuda_sizes::flash_bwd_uses_hopper_h200(s, qkv.dtype)) {  // deterministic: dQ in key-tile order (waits)
      const double rate = sm90_bwd / (deterministic_ ? rates_.attention_det_bwd_sm90 : 1.0);
      account(f, 2.5 * fwd_exec, rate, b(qkv) + b(dout) + b(out) + b(lse) + b(dqkv));
    } else {
      // deterministic: the mma.sync kernels' dK/dV pass, then a dQ pass that recomputes S and dP again (3 products)
      // (its per-tile cost is fitted to bf16; fp32's mma.sync kernels keep their constant rate in both modes)
      double mma_sync = qkv.dtype == DType::bf16 ? rates_.attention_bf16 : rates_.attention_f32;
      if (deterministic_ && qkv.dtype == DType::bf16)
        mma_sync *= rates_.sm90_seq_len_factor(s.T, rates_.attention_det_bwd_t0);
      account(f, (deterministic_ ? 3.5 : 2.5) * fwd_exec, mma_sync, b(qkv) + b(dout) + b(out) + b(lse) + b(dqkv));
    }
  } else {
    const bool stored = probs.data != nullptr;
    if (cuda()) scratch(cuda_sizes::naive_attention_bwd_scratch_bytes(s, qkv.dtype, stored));
    const double tt = double(s.B) * s.H * double(s.T) * s.T;
    account(f, stored ? f : 1.25 * f, qkv.dtype == DType::bf16 ? rates_.gemm_bf16 : rates_.gemm_f32,
            b(qkv) + b(dout) + b(lse) + b(dqkv) + b(probs) + tt * 8);
  }
}

void MetaBackend::swiglu_fwd(Tensor g, const Tensor& ab) { account(0, 0, 0, b(ab) + b(g)); }
void MetaBackend::swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g) {
  account(0, 0, 0, b(dg) + b(ab) + b(dab) + b(g));
}
void MetaBackend::add_inplace(Tensor x, const Tensor& y) { account(0, 0, 0, 2 * b(x) + b(y)); }
void MetaBackend::cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets, float) {
  account(0, 0, 0, b(logits) + b(dlogits) + b(losses) + b(targets));
}
double MetaBackend::sum(const Tensor& x) {
  account(0, 0, 0, b(x));
  return 0;
}
double MetaBackend::sum_squares(const Tensor& x) {
  account(0, 0, 0, b(x));
  return 0;
}
void MetaBackend::clip_factor_to(const Tensor& g, double, double*, float*) { account(0, 0, 0, b(g)); }
void MetaBackend::scale(Tensor x, float) { account(0, 0, 0, 2 * b(x)); }
void MetaBackend::cast(Tensor dst, const Tensor& src) { account(0, 0, 0, b(dst) + b(src)); }
double MetaBackend::adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs&) {
  account(0, 0, 0, 2 * b(p) + b(g) + 2 * b(m) + 2 * b(v) + b(p_work));
  return 0;
}
void MetaBackend::matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                                  const AdamWArgs& a, Tensor g_buf, bool accumulate) {
  if (!cuda() || dY.dtype != DType::bf16 || X.dtype != DType::bf16 || p.dtype != DType::f32) {
    Backend::matmul_dw_adamw(p, m, v, p_work, dY, X, a, g_buf, accumulate);
    return;
  }
  // the fused kernel (MetaRates::dw_adamw_gemm): its product, then its epilogue's bytes (p, m, v read and written,
  // p_work written, the earlier sum read when accumulating), no temporary
  const double f = 2.0 * double(p.numel()) * double(dY.rows());
  account(f, f, rates_.dw_adamw_gemm, b(dY) + b(X),
          2 * b(p) + 2 * b(m) + 2 * b(v) + b(p_work) + (accumulate ? b(g_buf) : 0.0), rates_.dw_adamw_epilogue_exposed);
}

}  // namespace trainer
