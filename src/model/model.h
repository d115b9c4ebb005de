// BasicsTransformerLM (CS336 basics; DESIGN.md "model contract") with hand-written forward and backward.
//
// Parameters live in one flat fp32 buffer (the master copy) with the layout below; gradients (fp32) and AdamW state
// share that layout, so data-parallel strategies and the fused AdamW work on flat ranges. In bf16 mixed precision a
// bf16 working copy of the same layout feeds the matmuls.
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
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"
#include "model/residency.h"

namespace trainer {

struct HostTensor;

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

/// FLOPs per token of the forward pass: 2 * (matmul parameters) + 4 * L * T * D (attention scores and P·V counted in
/// full, as PaLM's MFU does). A training step is 3x that.
double forward_flops_per_token(const ModelDims& d);

class Model {
 public:
  /// Allocates parameters and gradients on `be`. act_dtype f32 (fp32) or bf16 (mixed precision: adds a bf16 copy).
  /// The flat buffers hold flat_size() = layout().total() rounded up to `flat_multiple` elements (zero padding), so
  /// sharded strategies can split them into equal chunks.
  Model(Backend& be, const ModelDims& dims, DType act_dtype, AttnImpl attn,
        int64_t flat_multiple = ParamLayout::kAlign);
  int64_t flat_size() const { return flat_size_; }
  ~Model();

  const ModelDims& dims() const { return dims_; }
  const ParamLayout& layout() const { return layout_; }
  Backend& backend() { return be_; }
  DType act_dtype() const { return act_dtype_; }
  Tensor params() const;       // f32 [flat_size] master weights
  Tensor grads() const;        // f32 [flat_size]
  Tensor params_work() const;  // act dtype [flat_size]: the bf16 copy, or the master itself in fp32

  /// Truncated-normal init (DESIGN.md), deterministic in seed (counter-based, parallel over threads).
  void init_random(uint64_t seed);
  /// Loads every parameter by reference name; ConfigError naming the file if a name is missing, a shape differs
  /// or a dtype is not F32/F64/BF16.
  void load(const std::map<std::string, HostTensor>& tensors, const std::string& source);
  /// One parameter (or its gradient) copied to the host as fp32.
  std::vector<float> download(const ParamInfo& p, bool grad = false) const;
  /// Refreshes the bf16 working copy from the master weights (no-op in fp32).
  void sync_work_copy();
  /// Starts a step's gradients: the next backward writes the weight and RMSNorm gradients (later ones accumulate);
  /// the embedding gradient, which receives scattered adds, is zeroed here.
  void zero_grads();

  /// Allocates the activation store for microbatches of up to `rows` sequences of `seq_len` tokens.
  void reserve(int rows, int seq_len);
  /// Uploads the whole step's tokens (inputs, targets: host int32 [tokens], tokens as given to begin_step_losses)
  /// in one copy, so the microbatches' forwards enqueue without a host round trip each.
  void set_step_tokens(const int32_t* inputs, const int32_t* targets);
  /// Forward of one microbatch: rows x seq_len tokens starting at token `offset` of the step's tokens
  /// (set_step_tokens). Per-token losses go to [offset, offset + rows*seq_len) of the step's loss buffer (read with
  /// step_loss_sum()). If backward_next, the fused cross-entropy also writes dlogits scaled by dscale (1 / tokens of
  /// the global batch) for backward().
  void forward(int64_t offset, int rows, int seq_len, bool backward_next, float dscale);
  /// The same with this microbatch's tokens given here (host int32 [rows, seq_len]): they are uploaded into the
  /// step's tokens at loss_slot first (one synchronising copy; tests and one-microbatch callers).
  void forward(const int32_t* inputs, const int32_t* targets, int rows, int seq_len, bool backward_next,
               float dscale, int64_t loss_slot);
  /// Backward of the last forward; gradients accumulate into grads(). on_unit_ready(u) fires when unit u's gradient
  /// range is complete (only when non-null).
  void backward(const std::function<void(int)>& on_unit_ready = {});

  /// The parallel strategy that provides each unit's weights and takes its gradients (model/residency.h); without
  /// one (nullptr, the default) the model uses its own full buffers.
  void set_residency(ParamResidency* r) { residency_ = r; }
  /// The residency over the Model's own full buffers: unit u's range of the working weights and (backward uses) of
  /// the gradients; accumulate is true once the unit's gradient was written since zero_grads().
  UnitView full_view(int unit, UnitPass pass);
  /// Ends a use of full_view: a backward / forward_backward use marks the unit's gradient written.
  void full_release(int unit, UnitPass pass);
  /// Resizes and zeroes the step's per-token loss buffer to `tokens` entries (and sizes the step's token buffer).
  void begin_step_losses(int64_t tokens);
  double step_loss_sum();  // (syncs)

  /// Bytes of activations one block keeps for backward at `rows` x `seq_len` tokens.
  size_t saved_bytes_per_block(int rows, int seq_len) const;

 private:
  struct BlockActs;
  struct LayerRefs {  // a block's parameters in the flat layout
    const ParamInfo *ln1, *wqkv, *wo, *ln2, *w13, *w2;
  };
  BlockActs sized(const BlockActs& full, int rows, int seq_len) const;
  Tensor w(const ParamInfo& p, const Tensor& flat, std::initializer_list<int64_t> shape) const;
  void layer_forward(int l, const Tensor& x_in, Tensor x_out, BlockActs& a, const AttnShape& s);
  void layer_backward(int l, Tensor dx, BlockActs& a, const AttnShape& s);

  Backend& be_;
  ModelDims dims_;
  ParamLayout layout_;
  DType act_dtype_;
  AttnImpl attn_;
  int64_t flat_size_ = 0;
  std::vector<LayerRefs> layer_refs_;
  const ParamInfo *emb_ = nullptr, *ln_final_ = nullptr, *lm_head_ = nullptr;
  Buffer params_, grads_, work_;
  // activation store (sized by reserve)
  int cap_rows_ = 0, cap_T_ = 0, rows_ = 0, T_ = 0;
  Buffer acts_, scratch_, tokens_, losses_;  // tokens_: the step's inputs then targets, i32 [2 * loss_capacity_]
  Tensor cur_inputs_;                         // the last forward's inputs, for embedding_bwd
  float grad_beta_ = 1.f;                     // 0 after zero_grads(): the next backward writes weight gradients
  std::vector<BlockActs> blocks_;
  struct HeadActs;
  std::unique_ptr<HeadActs> head_;
  int64_t loss_capacity_ = 0, loss_used_ = 0;
  ParamResidency* residency_ = nullptr;
  std::vector<bool> unit_written_;  // [unit] gradient written since zero_grads() (full_view's accumulate)
};

}  // namespace trainer
