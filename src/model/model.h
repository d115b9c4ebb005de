// BasicsTransformerLM (CS336 basics; DESIGN.md "model contract") with hand-written forward and backward.
//
// Parameters live in one flat buffer of the storage dtype (fp32, the master copy; bf16 for bf16_pure) with the layout
// below; gradients and AdamW state (same dtype) share that layout, so data-parallel strategies and the fused AdamW
// work on flat ranges. In bf16 mixed precision a bf16 working copy of the same layout feeds the matmuls.
//
// Flat layout, in order (each group starts at a multiple of kAlign elements):
//   unit 0:        token_embeddings.weight [V, D]
//   unit 1+i:      layers.i.ln1.weight [D] | q_proj, k_proj, v_proj [D, D] each, contiguous = Wqkv [3D, D] |
//                  output_proj [D, D] | ln2.weight [D] | ffn.w1, ffn.w3 [F, D] each, contiguous = W13 [2F, D] |
//                  ffn.w2 [D, F]
//   unit L+1:      ln_final.weight [D] | lm_head.weight [V, D]
// Backward produces the units' gradients in the order L+1, L, ..., 1, 0 (a unit's gradient is complete when the
// backward hook for it fires), i.e. from the end of the flat buffer towards its start.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "io/safetensors.h"
#include "model/activations.h"
#include "model/residency.h"

namespace trainer {



struct ModelDims {
  int vocab_size = 0, context_length = 0, d_model = 0, d_ff = 0, num_layers = 0, num_heads = 0;
  double rope_theta = 10000.0;
  int d_head() const { return d_model / num_heads; }
};
ModelDims model_dims(const ModelCfg& m);

struct ParamInfo {
  std::string name;             // reference name, e.g. "layers.3.attn.q_proj.weight"
  std::vector<int64_t> shape;   // reference shape
  int64_t offset = 0;           // elements into the flat buffer
  int64_t numel = 0;
  int unit = 0;                 // 0 embedding, 1..L layers, L+1 head
  /// A matrix that starts a weight-gradient product: that product's elements (q: q, k, v as one [3 d_model, d_model];
  /// w1: w1, w3 as one [2 d_ff, d_model]; else its own); 0 for the matrices it spans after the first and for vectors.
  int64_t product_numel = 0;
};

class ParamLayout {
 public:
  static constexpr int64_t kAlign = 64;  // elements: 256 B for fp32, keeps cuBLASLt pointers 16-B aligned
  explicit ParamLayout(const ModelDims& d);
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo& find(const std::string& name) const;   // RuntimeError if absent
  int64_t total() const { return total_; }                 // elements, including alignment padding
  int64_t count() const { return count_; }                 // parameters, without padding
  int num_units() const { return int(unit_begin_.size()); }
  int64_t unit_begin(int u) const { return unit_begin_[u]; }
  int64_t unit_end(int u) const { return unit_end_[u]; }

 private:
  std::vector<ParamInfo> params_;
  std::vector<int64_t> unit_begin_, unit_end_;
  int64_t total_ = 0, count_ = 0;
};

/// Whether `tensors` (a safetensors file's, data or header only) are the parameters of `layout` by reference name,
/// each at its shape, in F32, F64 or BF16, and nothing else: ConfigError "KEY: 'SOURCE' ..." naming the first that
/// is missing or differs, or the tensors the model does not have (KEY: the config key that named the file,
/// init.weights or init.resume).
void check_weight_tensors(const ParamLayout& layout, const std::map<std::string, HostTensor>& tensors,
                          const std::string& source, const std::string& key);

/// check_weight_tensors on the header of the safetensors file `path` (its data is not read): whether the file can be
/// the weights of model `m`, so that a run refuses one that cannot before it starts (config/validate.cpp). ConfigError
/// "KEY: ..." as read_safetensors (an unreadable or malformed file) or check_weight_tensors raise it.
void check_weights_file(const ModelCfg& m, const std::string& path, const std::string& key);

/// FLOPs per token of the forward pass: 2 * (matmul parameters) + 4 * L * T * D (attention scores and P·V counted in
/// full, as PaLM's MFU does). A training step is 3x that.
double forward_flops_per_token(const ModelDims& d);

/// What the Model allocates for its parameters (the strategy decides; jobs/train_setup.cpp).
struct ParamStorage {
  bool full_params = true;   // the full flat weights (and, in mixed precision, the bf16 working copy); false: the
                             //   strategy keeps shards (fsdp)
  bool full_grads = true;    // the full flat gradients; false: the strategy hands each unit's gradient out in
                             //   UnitView::grads (optimizer.in_backward keeps them per unit), or the run has no
                             //   backward (bench.phase forward)
  DType dtype = DType::f32;  // storage dtype of weights and gradients: f32 (fp32 and mixed precision) or bf16
                             //   (bf16_pure: no working copy; the AdamW state follows)
  ParamStorage(bool full = true) : full_params(full), full_grads(full) {}  // NOLINT: bool = full buffers or none
  ParamStorage(bool full, bool grads, DType t) : full_params(full), full_grads(grads), dtype(t) {}
};

class Model {
 public:
  /// act_dtype f32 (fp32) or bf16 (mixed precision: adds a bf16 working copy of f32 weights; bf16_pure: the weights
  /// themselves are bf16, storage.dtype). With storage.full_params (every strategy but fsdp) the Model allocates
  /// the full flat weights, working copy and (storage.full_grads) gradients; they hold flat_size() =
  /// layout().total() rounded up to `flat_multiple` elements (zero padding), so sharded strategies can split them into
  /// equal chunks. Without, the strategy attached by set_residency() keeps them (model/residency.h).
  /// `policy` decides what each block keeps for its backward (model/activations.h).
  Model(Backend& be, const ModelDims& dims, DType act_dtype, AttnImpl attn,
        int64_t flat_multiple = ParamLayout::kAlign, ParamStorage storage = {}, ActivationPolicy policy = {});
  int64_t flat_size() const { return flat_size_; }
  ~Model();

  const ModelDims& dims() const { return dims_; }
  const ParamLayout& layout() const { return layout_; }
  Backend& backend() { return be_; }
  DType act_dtype() const { return act_dtype_; }
  AttnImpl attention() const { return attn_; }
  const ActivationPolicy& policy() const { return policy_; }
  DType param_dtype() const { return param_dtype_; }  // storage dtype of weights and gradients (ParamStorage)
  bool has_full_grads() const { return bool(grads_); }
  Tensor params() const;       // param_dtype [flat_size] master weights (full_params only)
  Tensor grads() const;        // param_dtype [flat_size] (full_grads only)
  Tensor params_work() const;  // [flat_size] what the matmuls read: the bf16 copy in mixed precision, else the
                               // master itself (full_params only)

  /// Truncated-normal init (DESIGN.md), deterministic in seed (counter-based, parallel over threads). Records the
  /// seed as the weight source (initial_values) and fills the full buffers when the model has them.
  void init_random(uint64_t seed);
  /// Loads every parameter by reference name; ConfigError starting with `key` (the config key that named the file:
  /// init.weights, init.resume) and naming the file where check_weight_tensors refuses the tensors or a value is not
  /// finite in fp32 (and, with bf16 parameters, bf16_pure, in bf16). Fills the full buffers when the model has them;
  /// otherwise keeps the tensors as the weight source until release_weight_source().
  void load(std::map<std::string, HostTensor> tensors, const std::string& source,
            const std::string& key = "init.weights");
  /// The host fp32 values of parameter p from the weight source (init_random's seed or load's tensors): what a
  /// sharded strategy copies its shard from in setup(). RuntimeError when there is no source.
  std::vector<float> initial_values(const ParamInfo& p) const;
  /// Whether initial_values has a source (false in the planner's dry run, which skips the weights).
  bool has_weight_source() const { return init_seed_.has_value() || init_tensors_ != nullptr; }
  /// Frees load()'s tensors (after the strategy's setup).
  void release_weight_source();
  /// One parameter (or its gradient) copied to the host as fp32 (full_params only; Strategy::download_param
  /// works for every strategy).
  std::vector<float> download(const ParamInfo& p, bool grad = false) const {
    return download_f32(be_, (grad ? grads() : params()).slice(p.offset, {p.numel}));
  }
  /// Refreshes the bf16 working copy from the master weights (no-op in fp32).
  void sync_work_copy();
  /// Starts a step's gradients: the next backward of each unit writes its gradient (later microbatches accumulate).
  void zero_grads();

  /// Allocates the backward's scratch for microbatches of up to `rows` sequences of `seq_len` tokens. Activations
  /// are allocated as the forward runs and freed as the backward consumes them (policy()).
  void reserve(int rows, int seq_len);
  /// Uploads the whole step's tokens (inputs, targets: host int32 [tokens], tokens as given to begin_step_losses)
  /// in one copy, so the microbatches' forwards enqueue without a host round trip each.
  void set_step_tokens(const int32_t* inputs, const int32_t* targets);
  /// Forward of one microbatch: rows x seq_len tokens starting at token `offset` of the step's tokens
  /// (set_step_tokens). Per-token losses go to [offset, offset + rows*seq_len) of the step's loss buffer (read with
  /// step_loss_sum()). If backward_next, the fused LM head also computes the head's gradients and the gradient
  /// flowing into the last block (loss scaled by dscale = 1 / tokens of the global batch) for backward().
  void forward(int64_t offset, int rows, int seq_len, bool backward_next, float dscale);
  /// The same with this microbatch's tokens given here (host int32 [rows, seq_len]): they are uploaded into the
  /// step's tokens at loss_slot first (one synchronising copy; tests and one-microbatch callers).
  void forward(const int32_t* inputs, const int32_t* targets, int rows, int seq_len, bool backward_next,
               float dscale, int64_t loss_slot);
  /// Backward of the last forward (which had backward_next); gradients go where the residency says (accumulating
  /// over microbatches). Without an attached residency, on_unit_ready(u) fires when unit u's gradient range is
  /// complete (only when non-null).
  void backward(const std::function<void(int)>& on_unit_ready = {});
  /// Resizes and zeroes the step's per-token loss buffer to `tokens` entries (and sizes the step's token buffer).
  void begin_step_losses(int64_t tokens);
  double step_loss_sum();  // (syncs)

  /// The order of unit uses of one microbatch (forward, and backward when backward_next) under policy(): what
  /// forward() hands to ParamResidency::begin_schedule.
  std::vector<UnitUse> unit_schedule(bool backward_next);

  /// The parallel strategy that provides each unit's weights and takes its gradients (model/residency.h); without
  /// one (nullptr, the default) the model uses its own full buffers.
  void set_residency(ParamResidency* r) { residency_ = r; }
  /// The residency over the Model's own full buffers: unit u's range of the working weights and (backward uses) of
  /// the gradients; accumulate is true once the unit's gradient was written since zero_grads().
  UnitView full_view(int unit, UnitPass pass);
  /// Ends a use of full_view: a backward / forward_backward use marks the unit's gradient written.
  void full_release(int unit, UnitPass pass);

  /// Bytes of activations one stored block keeps for backward at `rows` x `seq_len` tokens (its input included),
  /// under policy() (none keeps the elementwise results too).
  size_t saved_bytes_per_block(int rows, int seq_len) const;

 private:
  struct BlockActs;
  struct Scratch;
  struct LayerRefs {  // a block's parameters in the flat layout
    const ParamInfo *ln1, *wqkv, *wo, *ln2, *w13, *w2;
  };
  // a block forward's activations: kept for its backward; discarded (recomputed later; keep_attention stashes
  // attention's outputs); or a forward with no backward after it (bench.phase forward: nothing is kept)
  enum class Store : uint8_t { keep, discard, inference };
  std::vector<SavedTensorSpec> table(int rows, int T) const;
  BlockActs carve(char* store, const Tensor& x_in, int rows, int T, bool with_elementwise) const;
  Tensor w(const ParamInfo& p, const UnitView& v, std::initializer_list<int64_t> shape) const;
  Tensor g(const ParamInfo& p, const UnitView& v, std::initializer_list<int64_t> shape) const;
  /// The gradient of weight p ([rows, cols]) from its backward product dW (+)= dYᵀ X: into p's slice of v.grads (beta
  /// gb), or, when v.weight_update takes p, its fused update (optimizer.in_gemm).
  void weight_grad(const UnitView& v, const ParamInfo& p, int64_t rows, int64_t cols, const Tensor& dY,
                   const Tensor& X, float gb);
  UnitView acquire(int unit, UnitPass pass);
  void release(int unit, UnitPass pass);
  // the step's control flow; with recording_ set, the block functions only append their unit use
  void run_forward(bool backward_next);
  void run_backward();
  void block_forward(int l, UnitPass pass, Store store, bool need_output);
  void block_backward(int l);
  void nested_backward(int a, int b);
  void head(bool backward_next);
  void layer_forward(const UnitView& v, int l, BlockActs& a, Tensor x_out, const AttnShape& s);
  void layer_backward(const UnitView& v, int l, Tensor dx, BlockActs& a, const AttnShape& s);
  void upload(const ParamInfo& p, const std::vector<float>& host);  // into the full weights, in param_dtype
  Tensor x(int l) const;  // the residual stream entering block l (l = L: the head's input), [N, D]
  void alloc_x(int l);
  void free_x(int l);
  void free_activations();

  Backend& be_;
  ModelDims dims_;
  ParamLayout layout_;
  DType act_dtype_;
  AttnImpl attn_;
  ActivationPolicy policy_;
  DType param_dtype_ = DType::f32;
  std::vector<Segment> segments_;
  int64_t flat_size_ = 0;
  std::vector<LayerRefs> layer_refs_;
  const ParamInfo *emb_ = nullptr, *ln_final_ = nullptr, *lm_head_ = nullptr;
  Buffer params_, grads_, work_;
  std::optional<uint64_t> init_seed_;                                   // weight source: random init
  std::shared_ptr<const std::map<std::string, HostTensor>> init_tensors_;  // weight source: loaded tensors
  // activations (allocated per step)
  int cap_rows_ = 0, cap_T_ = 0, rows_ = 0, T_ = 0;
  bool backward_ready_ = false;               // the last forward had backward_next and its backward is pending
  std::vector<Buffer> x_;                     // [L + 1] residual stream at each block boundary (empty: not alive)
  std::vector<Buffer> store_;                 // [L] a block's kept activations (empty: not alive)
  std::vector<Buffer> attn_kept_;             // [L] checkpointing.keep_attention: a checkpointed block's attn_out, lse
  std::unique_ptr<Scratch> scratch_;          // the backward's gradient buffers and forward temporaries
  Buffer scratch_buf_, tokens_, losses_;      // tokens_: the step's inputs then targets, i32 [2 * loss_capacity_]
  Tensor cur_inputs_, cur_targets_;           // the last forward's tokens
  float dscale_ = 1.f;
  std::vector<UnitUse>* recording_ = nullptr;  // unit_schedule: record the uses instead of running
  std::vector<bool> x_alive_;                 // [L + 1] x(l) alive (kept current while recording too)
  std::vector<UnitUse> schedule_[2];          // unit_schedule(false / true), computed once
  bool head_ready_pending_ = false;           // the fused head's gradient is done, not yet reported (no residency)
  int64_t loss_capacity_ = 0, loss_used_ = 0, loss_offset_ = 0;
  ParamResidency* residency_ = nullptr;
  std::function<void(int)> on_unit_ready_;    // backward()'s hook (no residency attached)
  std::vector<bool> unit_written_;            // [unit] gradient written since zero_grads() (full_view's accumulate)
};

}  // namespace trainer
