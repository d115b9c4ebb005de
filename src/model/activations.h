// What a Transformer block keeps from its forward for its backward — described once, here — and how an activation
// checkpointing policy groups the blocks into segments. The model's activation store (model.cpp), the record's
// saved_activation_bytes_per_block and the planner (plan/, a dry run of the model) all read this description.
//
// References: Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost" (segments of k blocks, sqrt(L) and the
// recursive O(log L) scheme); Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models" (selective recomputation); CS336 assignment 2, section 3 (activation checkpointing).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"

namespace trainer {

/// How a saved tensor can be had again in the backward.
///   input:       the block's input x_in (the residual stream); kept by stored blocks and segment starts
///   kept:        a GEMM or attention output (qkv after RoPE, attention O and logsumexp, x_mid, [w1 h | w3 h]) or an
///                RMSNorm's 1/rms; always kept by a stored block (recomputing them costs a GEMM or attention)
///   elementwise: a cheap elementwise result (RMSNorm outputs h1, h2; the SwiGLU product g); kept only by `none`,
///                otherwise recomputed in the backward from the kept tensors (one RMSNorm / SwiGLU pass each)
enum class SavedKind : uint8_t { input, kept, elementwise };
const char* saved_kind_name(SavedKind k);  // "input", "kept", "elementwise"

/// One tensor of a block's activation store. N = rows * T tokens, D = d_model, F = d_ff, H = num_heads.
struct SavedTensorSpec {
  const char* name;
  SavedKind kind;
  DType dtype;
  int ndim;
  std::array<int64_t, 4> shape;
  bool attention_output = false;  // attention's result (O, logsumexp, naive's probabilities): what a checkpointed
                                  // block keeps aside with checkpointing.keep_attention
  size_t bytes() const;
};

/// The table, in store order: x_in [N, D], h1 [N, D], rstd1 [N] f32, qkv [N, 3D] (after RoPE), attn_out [N, D],
/// lse [rows, H, T] f32, probs [rows, H, T, T] (naive attention only), x_mid [N, D], h2 [N, D], rstd2 [N] f32,
/// ab [N, 2F], g [N, F]. act is the activation dtype (bf16 or f32).
std::vector<SavedTensorSpec> block_saved_tensors(int64_t d_model, int64_t d_ff, int num_heads, DType act,
                                                 bool naive_attention, int rows, int T);

/// Bytes of one block's store (256-B aligned tensors) holding the tensors of the table that `keep` selects.
size_t store_bytes(const std::vector<SavedTensorSpec>& table, bool with_input, bool with_elementwise);

/// A run of consecutive blocks [begin, end) and how it meets the backward:
///   stored: one block that keeps its activations from the forward (no recompute);
///   flat:   the segment keeps its input only; the backward recomputes all its blocks (keeping their activations),
///           then runs their backwards (full: segments of one block; every_k: of k);
///   nested: the segment keeps its input (and, from the forward, the inputs at the recursive midpoints of its last
///           half); the backward halves it recursively: forward to the midpoint, backward of the second half, then
///           of the first. O(log n) inputs alive at once, O(n log n) block recomputes.
struct Segment {
  enum class Kind : uint8_t { stored, flat, nested };
  int begin = 0, end = 0;
  Kind kind = Kind::stored;
};

/// The policy of checkpointing.* resolved for a model of num_layers blocks.
struct ActivationPolicy {
  std::string policy = "selective";        // none | selective | full | every_k | sqrt | nested
  int k = 2;                               // every_k segment length
  std::optional<std::vector<int>> blocks;  // only these blocks are checkpointed (null: the policy's choice)
  int lm_head_chunk_tokens = 0;            // 0: auto
  bool keep_attention = false;             // checkpointed blocks keep attn_out and lse (their recompute skips attention)
  static ActivationPolicy from(const CheckpointingCfg& c);
  /// Stored blocks keep the elementwise results too (policy none).
  bool keep_elementwise() const { return policy == "none"; }
  /// Whether a block that is not recomputed keeps `t` for its backward (store_bytes' rule with the input).
  bool stored_keeps(const SavedTensorSpec& t) const { return t.kind != SavedKind::elementwise || keep_elementwise(); }
  /// Whether a recomputed block keeps `t` from its forward to its backward: its input (where a segment starts) and,
  /// with keep_attention, attention's outputs (model.cpp's stash).
  bool recomputed_keeps(const SavedTensorSpec& t) const {
    return t.kind == SavedKind::input || (t.attention_output && keep_attention);
  }
  /// The segments covering blocks 0 .. num_layers-1 in order. Blocks not checkpointed are stored segments of one.
  ///   none, selective: every block stored, except that listed `blocks` are recomputed one by one (as full);
  ///   full:            each checkpointed block is a flat segment of one;
  ///   every_k / sqrt:  consecutive checkpointed blocks form flat segments of k (sqrt: k = round(sqrt(num_layers)),
  ///                    at least 1); a run's last segment may be shorter;
  ///   nested:          each run of consecutive checkpointed blocks is one nested segment.
  std::vector<Segment> segments(int num_layers) const;
};

/// Rows per chunk of the fused LM head + loss for N tokens: lm_head_chunk_tokens if set (capped at N), else the
/// largest multiple of 128 whose head buffers in `act` (logits [chunk, vocab], the normed input and its gradient
/// [chunk, d_model], fp32 rstd) take at most 1 GiB (at least 128, at most N).
int64_t lm_head_chunk_rows(int64_t N, int64_t vocab, int64_t d_model, DType act, int lm_head_chunk_tokens);

}  // namespace trainer
