// Backend: the narrow op table the model, the optimizer and every parallel strategy are written against.
//
// Two implementations: backend/cpu (fp32 reference, OpenBLAS; runs in CI) and backend/cuda (kernels/ + cuBLASLt).
// All tensors passed to a backend live on that backend's device. Ops are enqueued in order on the backend's compute
// stream (the CPU backend runs them at once); only the ops documented "(syncs)" wait for the device.
//
// Layouts (row-major; N = B*T rows of a microbatch, D = d_model, F = d_ff, H = num_heads, dh = d_head = D/H):
//   activations x, h   [N, D]       qkv [N, 3D] = [q | k | v], head h of q at columns h*dh .. h*dh+dh-1
//   ab  [N, 2F] = [w1 x | w3 x]     g [N, F]     logits [N, V]     lse [B, H, T] fp32     probs [B, H, T, T]
// Activation dtype is fp32, or bf16 in mixed precision (CUDA only). Parameters, their gradients and the AdamW
// moments are fp32, or all bf16 in pure-bf16 training (bf16 storage, "precision: bf16_pure"): every op that writes a
// bf16 parameter-shaped tensor (weight gradients of matmul, rmsnorm_bwd's dw, embedding_bwd's dtable, AdamW's p, m,
// v) accumulates in fp32 and rounds each element once per call, to nearest even (backend/bf16.h). On the CPU backend
// bf16 is storage only (emulated: converted to fp32 temporaries, results rounded); CPU activations stay f32.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "backend/adamw_step.h"
#include "core/memory.h"
#include "core/tensor.h"

namespace trainer {

class Backend;

/// An owning allocation made through a Backend, tagged with a memory category. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* be, size_t bytes, Category cat);
  ~Buffer();
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept { swap(o); return *this; }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }
  /// A tensor view of the first elements of this buffer.
  Tensor view(DType t, std::initializer_list<int64_t> shape) const;
  void reset();

 private:
  void swap(Buffer& o) noexcept;
  Backend* be_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  uint64_t id_ = 0;  // MemoryStats::on_alloc's id (the memory timeline matches frees to allocations by it)
  Category cat_ = Category::workspace;
};

/// A point in the compute stream's timeline (a CUDA event, or a host clock reading on the CPU).
struct Event {
  virtual ~Event() = default;
  /// The native handle (cudaEvent_t) for communicators that time their own streams against it; nullptr on the CPU.
  virtual void* native_handle() { return nullptr; }
};

/// A captured sequence of a backend's work (Backend::capture): a CUDA graph, instantiated.
struct Graph {
  virtual ~Graph() = default;
  /// Enqueues one replay on the compute stream (no sync).
  virtual void launch() = 0;
  /// Nodes in the graph (kernels, copies, fills).
  virtual size_t nodes() const = 0;
};

/// Receives named ranges (profile/profiler.h implements it: NVTX and Chrome traces). index >= 0 is appended to the
/// name ("block 3"). A backend without a sink opens no ranges.
class RangeSink {
 public:
  virtual ~RangeSink() = default;
  virtual void push(const char* name, const char* cat, int index) = 0;
  virtual void pop() = 0;
};

struct AttnShape {
  int B = 1, T = 1, H = 1, d_head = 1;  // batch rows, sequence length, heads, head dim
  bool causal = true;
  float scale = 1.f;                    // softmax scale, 1/sqrt(d_head)
};
enum class AttnImpl { naive, flash2 };

/// Hyper-parameters of one AdamW step (DESIGN.md: the course's AdamW; t starts at 1).
struct AdamWArgs {
  /// The hyperparameters as configured (double): the backends derive their fp32 constants from them, 1 - beta in
  /// double before the rounding (as PyTorch's fp32 AdamW takes 1 - beta from a Python float), so a beta close to 1
  /// keeps its (1 - beta) and the bias corrections their exact beta.
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  int64_t t = 1;            // step number, 1-based, for the bias corrections
  float grad_scale = 1.f;   // g is multiplied by this first (gradient clipping folded in)
  bool grad_sumsq = false;  // also sum_i g[i]^2 (of g as given, before grad_scale), fused into the same pass
  /// bf16 path only: the new p is rounded stochastically (m and v stay round-to-nearest-even) with the random bits
  /// of backend/bf16.h: r = hash(seed, t, index_offset + i) for element i of this call, so the result depends only
  /// on (seed, t, the element's index) and not on how a range is split into calls or launched; E[round(x)] = x.
  bool stochastic_rounding = false;
  uint64_t seed = 0;
  int64_t index_offset = 0;  // index of this call's first element in the caller's flat numbering (any int64)
  /// With grad_sumsq: where the fp64 sum of g^2 is written (a device pointer on cuda, a host pointer on cpu; one
  /// double). Then adamw neither synchronises nor returns the sum (it returns 0). Null: adamw returns it (syncs).
  double* sumsq_to = nullptr;
  /// cuda: where the kernel reads decay, step_size and the rounding key (device memory holding
  /// adamw_step_values(*this), uploaded by AdamW::begin_step), so that a captured step replays with each step's lr
  /// and t. Null: the values computed from lr, t and seed here go in as kernel arguments. The cpu ignores it.
  const AdamWStepValues* step_values = nullptr;
  /// Where a factor of g's scale is (device on cuda, host on cpu; clip_factor_to writes it): g is multiplied by
  /// grad_scale * *grad_scale_by. Null: by grad_scale alone.
  const float* grad_scale_by = nullptr;
};

/// The per-step values of `a` (backend/adamw_step.h), in fp64 then rounded to float.
AdamWStepValues adamw_step_values(const AdamWArgs& a);

/// What GEMM autotuning did (cuda with gemm_autotune): shapes tuned, how many of them left the heuristic's first
/// choice, and the summed per-call ms of the heuristic's choice and of the kept one (one call of each shape).
struct GemmTuning {
  int shapes = 0;
  int changed = 0;
  double heuristic_ms = 0;
  double tuned_ms = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;         // "cpu", "cuda:0"
  virtual std::string description() const = 0;  // "NVIDIA H200, 139 GiB", "CPU (OpenBLAS, 2 threads)"
  /// GEMM autotuning so far (all zero where there is none: the CPU backend, or autotuning off).
  virtual GemmTuning gemm_tuning() const { return {}; }
  /// Bytes of device memory (the GPU's total), or 0 where unknown or unbounded (the CPU backend).
  virtual size_t device_memory_bytes() const { return 0; }

  // ---- memory ------------------------------------------------------------------------------------------------
  /// Allocates `bytes` tagged `cat`; throws OutOfMemory naming the request and what is in use by category.
  Buffer alloc(size_t bytes, Category cat) { return Buffer(this, bytes, cat); }
  MemoryStats& memory() { return stats_; }
  virtual void* raw_alloc(size_t bytes) = 0;  // nullptr when out of memory
  virtual void raw_free(void* p) = 0;
  /// Device memory the backend's allocator holds, bytes: live allocations (rounded up) plus the cached free blocks
  /// it keeps for reuse; and the highest value so far. 0 for a backend without a caching allocator (cpu).
  virtual size_t reserved_bytes() const { return 0; }
  virtual size_t peak_reserved_bytes() const { return 0; }
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;  // (syncs)
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;    // (syncs)
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;            // device to device
  virtual void fill(Tensor t, float value) = 0;                               // f32, bf16 or i32
  virtual void synchronize() = 0;
  /// The compute stream (cudaStream_t) or nullptr on the CPU; communicators order themselves after it.
  virtual void* stream() { return nullptr; }

  // ---- graphs ------------------------------------------------------------------------------------------------
  /// Records what `enqueue` puts on the compute stream into a graph instead of running it (nothing runs; launch()
  /// runs it, as often as wanted, with the same pointers and kernel arguments). Blocks the allocator hands out or
  /// takes back during the capture stay reserved for the graph until it is destroyed, so buffers allocated and
  /// freed inside a step keep their addresses across replays. The work must not synchronise or copy from pageable
  /// host memory, and should run once uncaptured first (GEMM tuning and workspace growth synchronise). cuda only: the default raises
  /// RuntimeError; so does cuda when the capture fails (nothing is kept; the stream is usable again).
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& enqueue);

  // ---- timing ------------------------------------------------------------------------------------------------
  virtual std::unique_ptr<Event> make_event() = 0;
  virtual void record(Event& e) = 0;
  virtual float elapsed_ms(Event& start, Event& end) = 0;  // (syncs on end)
  void set_range_sink(RangeSink* s) { ranges_ = s; }
  RangeSink* range_sink() const { return ranges_; }

  // ---- ops (see each implementation's source for the formula and reference) -----------------------------------
  /// C[M,N] = alpha * op(A) op(B) + beta * C, op(X) = X or Xᵀ. Tensors are seen as matrices (rows(), cols()).
  /// beta = 1 accumulates (weight gradients). The product and alpha AB + beta C are in fp32; a bf16 C is read as
  /// fp32 and rounded once (to nearest even), also with beta = 1.
  /// cuda: A, B f32 or bf16 (same dtype); C f32 or A's dtype. cpu: each of A, B, C f32 or bf16 (bf16 operands are
  /// converted to fp32 temporaries; e.g. f32 activations x bf16 weights -> f32, or f32 x f32 -> bf16 gradients).
  virtual void matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
                      float beta) = 0;
  /// D = op(A) op(B) + R: a product plus a residual (D and R the same shape and dtype, distinct memory; a
  /// RuntimeError otherwise). The CUDA backend adds R in cuBLASLt's epilogue (C input != D output); the default
  /// copies R into D, then accumulates.
  void matmul_add(Tensor D, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, const Tensor& R) {
    TRAINER_CHECK(D.dtype == R.dtype && D.rows() == R.rows() && D.cols() == R.cols(),
                  "matmul_add: D {} {} and residual {} {} differ", dtype_name(D.dtype), D.shape_str(),
                  dtype_name(R.dtype), R.shape_str());
    TRAINER_CHECK(D.data != R.data, "matmul_add: the residual is D itself (use matmul with beta 1)");
    matmul_residual(D, A, trans_a, B, trans_b, R);
  }
  /// out[n, :] = table[tokens[n], :]. tokens i32 [N], table [V, D], out [N, D]. table and out f32 or bf16, each its
  /// own dtype (cuda: any pair; cpu: out f32).
  virtual void embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) = 0;
  /// dtable[v, :] += sum over {n : tokens[n] = v} of dout[n, :] (accumulates). The rows of one token are summed in
  /// fp32 in increasing n (deterministic), then added to dtable: f32, or bf16 (one rounding per element per call; no
  /// fp32 copy of the table: cuda sums each token's rows in registers, cpu in a host temporary of the touched rows).
  /// dout f32 (cuda: or bf16).
  virtual void embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) = 0;
  /// y = w * x * rstd, rstd[n] = 1/sqrt(mean(x[n]^2) + eps) (fp32, kept for backward). x, y [N, D]; w [D]. Each of
  /// x, y, w f32 or bf16 (cuda: any combination; cpu: x, y f32).
  virtual void rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) = 0;
  /// dx += dL/dx (accumulates: the residual gradient flows through); dw += dL/dw, or dw = dL/dw when
  /// accumulate_dw is false (the step's first backward: no zeroing pass needed). dw f32 or bf16: the column sum over
  /// rows is in fp32 (deterministic order), then one rounding per element per call. w as in rmsnorm_fwd.
  virtual void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                           const Tensor& rstd, bool accumulate_dw = true) = 0;
  /// Rotates q and k of qkv [B*T, 3D] in place: pairs (2i, 2i+1) of each head at position t by angle
  /// t * theta^(-2i/d_head); inverse = true rotates by minus that angle (the backward pass).
  virtual void rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) = 0;
  /// out [B*T, D] = softmax(scale q kᵀ + causal mask) v per head, from qkv [B*T, 3D].
  /// lse [B, H, T] fp32 logsumexp of the scaled, masked scores (always written). probs [B, H, T, T]: naive only,
  /// the softmax kept for backward (may be empty for flash2).
  virtual void attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                             const Tensor& qkv) = 0;
  /// dqkv [B*T, 3D] (overwritten) from dout [B*T, D]; out, lse, probs as saved by attention_fwd.
  virtual void attention_bwd(AttnImpl impl, const AttnShape& s, Tensor dqkv, const Tensor& dout,
                             const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& probs) = 0;
  /// g [N, F] = silu(a) * b with ab = [a | b] [N, 2F].
  virtual void swiglu_fwd(Tensor g, const Tensor& ab) = 0;
  /// dab [N, 2F] (overwritten) = [dg * b * silu'(a) | dg * silu(a)]. If g [N, F] is given it also receives
  /// silu(a) * b (the forward's output, recomputed in the same pass); g may be dg itself (each element of dg is read
  /// before g's is written), which is how the model recomputes g without a second read of ab.
  virtual void swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g = Tensor()) = 0;
  /// x += y (same numel; each f32 or bf16, computed in fp32, one rounding into x).
  virtual void add_inplace(Tensor x, const Tensor& y) = 0;
  /// losses[n] = logsumexp(logits[n]) - logits[n, targets[n]] (fp32 [N]). If dlogits is non-empty (it may alias
  /// logits): dlogits[n] = dscale * (softmax(logits[n]) - onehot(targets[n])).
  virtual void cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets,
                             float dscale) = 0;
  /// Sum of an f32 or bf16 tensor, in fp64 on the host. (syncs)
  virtual double sum(const Tensor& x) = 0;
  /// Sum of squares of an f32 or bf16 tensor, in fp64 on the host, for the global gradient norm. (syncs)
  virtual double sum_squares(const Tensor& x) = 0;
  /// Gradient clipping without the host: *sumsq = sum of g^2 (fp64, as sum_squares), then *factor =
  /// float(min(1, max_norm / (sqrt(*sumsq) + 1e-6))) in fp64 (optim/schedule.h clip_factor's formula and value).
  /// Device pointers on cuda, host on cpu; no sync, so a step that clips can be captured (AdamWArgs::grad_scale_by
  /// reads the factor).
  virtual void clip_factor_to(const Tensor& g, double max_norm, double* sumsq, float* factor) = 0;
  /// x *= s (f32 or bf16; fp32 product, one rounding).
  virtual void scale(Tensor x, float s) = 0;
  /// dst = src with dtype conversion (f32 <-> bf16 round to nearest even, or a plain copy).
  virtual void cast(Tensor dst, const Tensor& src) = 0;
  /// One AdamW step over flat p, g, m, v (same numel), in one of two forms:
  ///  - fp32: p, g, m, v f32. If p_work is non-empty (bf16 or f32), it receives the updated p in its dtype in the
  ///    same pass. a.stochastic_rounding must be false.
  ///  - bf16 storage: p, g, m, v all bf16, p_work empty. Each element is loaded to fp32, updated with the same fp32
  ///    formula as the fp32 form (grad_scale first), and p, m, v are rounded to bf16 once each: to nearest even, or
  ///    p stochastically (a.stochastic_rounding; see AdamWArgs). Any numel and any start (bf16 granularity): calls
  ///    on sub-ranges of a flat buffer are fine.
  /// With a.grad_sumsq the fp64 sum of g^2 (g as given) comes out of the same pass, deterministic as sum_squares:
  /// returned (syncs), or written to *a.sumsq_to without a sync (returns 0). Otherwise returns 0.
  virtual double adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) = 0;
  /// A weight's gradient and its AdamW step in one call (optimizer.in_gemm): g = dYᵀ X (dY [K, M], X [K, N], the
  /// same dtype: the backward's matmul(g, dY, true, X, false, 1, 0)), or g = g_buf + dYᵀ X when `accumulate` (g_buf:
  /// p's dtype, M N elements, the step's earlier microbatches' or chunks' sum), then adamw(p, g, m, v, p_work, a)
  /// with p, m, v [M, N] (any shape of M N elements) and a as there (a.grad_sumsq needs a.sumsq_to: the sum of g^2
  /// goes there). g is the product's fp32 accumulation; it need not exist in memory. g_buf (optional without
  /// accumulate) is the gradient's slot, which may be overwritten with g. This default computes g into g_buf (matmul
  /// with beta 1 when accumulating: the numbers of the unfused backward), or a temporary (p's dtype,
  /// Category::gradients) when there is none, and calls matmul and adamw; cuda runs one fused kernel where it can
  /// (kernels/dw_adamw: sm_90, bf16 dY and X, f32 p, m, v and g_buf).
  virtual void matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                               const AdamWArgs& a, Tensor g_buf, bool accumulate);

 protected:
  /// matmul_add after its checks.
  virtual void matmul_residual(Tensor D, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                               const Tensor& R) {
    copy(D.data, R.data, D.bytes());
    matmul(D, A, trans_a, B, trans_b, 1.f, 1.f);
  }

  MemoryStats stats_;
  RangeSink* ranges_ = nullptr;
};

/// A named range on `be`'s timeline for the scope's lifetime (cat: "phase", "block", "attention", "op"); costs one
/// pointer test when no profiler is attached. "phase" and "block" ranges also set the memory context
/// (MemoryStats::phase / block), which the memory timeline and the peak's place in the record report.
class ScopedRange {
 public:
  ScopedRange(Backend& be, const char* name, const char* cat = "op", int index = -1) : sink_(be.range_sink()) {
    if (cat[0] == 'p' && std::string_view(cat) == "phase") {
      mem_ = &be.memory();
      saved_name_ = mem_->phase;
      mem_->phase = name;
      kind_ = 1;
    } else if (cat[0] == 'b' && std::string_view(cat) == "block") {
      mem_ = &be.memory();
      saved_name_ = mem_->block_name;
      saved_index_ = mem_->block;
      mem_->block_name = name;
      mem_->block = index;
      kind_ = 2;
    }
    if (sink_) sink_->push(name, cat, index);
  }
  ~ScopedRange() {
    if (sink_) sink_->pop();
    if (kind_ == 1) {
      mem_->phase = saved_name_;
    } else if (kind_ == 2) {
      mem_->block_name = saved_name_;
      mem_->block = saved_index_;
    }
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  RangeSink* sink_;
  MemoryStats* mem_ = nullptr;
  const char* saved_name_ = nullptr;
  int saved_index_ = -1;
  int kind_ = 0;  // 0 other, 1 phase, 2 block
};

/// How fp32 matrix products run on the GPU (config key fp32_matmul): IEEE fp32 on the CUDA cores, one TF32
/// tensor-core product, or three (3xTF32: A B ~ Ah Bh + Ah Bl + Al Bh with X = Xh + Xl split at TF32 precision;
/// Ootomo & Yokota 2022, arXiv:2203.03341; CUTLASS's 3xTF32 GEMMs): error of fp32's order at a third of the TF32 rate.
enum class Fp32Matmul { ieee, tf32, split3 };
/// "ieee", "tf32" or "3xtf32" (config.fp32_matmul; validated before) as the enum.
Fp32Matmul parse_fp32_matmul(const std::string& name);

struct BackendOptions {
  Fp32Matmul fp32_matmul = Fp32Matmul::ieee;  // fp32 matrix products (cuda)
  bool gemm_autotune = false;  // time cuBLASLt's candidate algorithms per shape on first use, keep the fastest (cuda)
  bool deterministic = false;  // flash attention backward: dQ summed in a fixed order, not by atomic adds (cuda)
  /// Logs every allocation and free from the backend's construction on (profile.memory_timeline); owned by the
  /// caller, who keeps it alive past the backend (the backend's own buffers are freed in its destructor).
  MemoryTimeline* memory_timeline = nullptr;
};

/// The backend for `device` ("cpu" or "cuda"); device_index picks the GPU. Throws ConfigError when CUDA was asked
/// for and is not available.
std::unique_ptr<Backend> make_backend(Device device, int device_index, const BackendOptions& opts = {});

/// The elements of `t` (contiguous, fp32 or bf16) copied to the host as fp32 (syncs; bf16 widened exactly).
/// TRAINER_CHECK on another dtype.
std::vector<float> download_f32(Backend& be, const Tensor& t);
/// True when this build has the CUDA backend and a GPU is visible.
bool cuda_available();
/// GPUs visible to this process (0 without the CUDA backend or a driver).
int cuda_device_count();
/// The name of the GPU a process of local rank `local_rank` runs on (local_rank modulo the visible GPUs, as the CUDA
/// backend picks it; cudaGetDeviceProperties, e.g. "NVIDIA H100 80GB HBM3"), or "" without the CUDA backend, a driver
/// or a GPU.
std::string cuda_device_name(int local_rank);

}  // namespace trainer
