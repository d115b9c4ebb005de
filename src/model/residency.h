// Parameter residency: the seam between the model and a parallel strategy (DESIGN.md "Memory and parallelism: the
// seams"; src/README.md).
//
// The model never reads the flat parameter or gradient buffers directly. Before it uses a unit (model.h: unit 0 the
// embedding, 1..L the blocks, L+1 ln_final + lm_head) it asks acquire(unit, pass) for a UnitView: the unit's weights in
// the compute dtype and, in a backward use, where its gradient goes (storage dtype: fp32; bf16 for bf16_pure). After
// the last operation that reads the weights (and writes the gradient) is enqueued on the compute stream, it calls
// release(unit, pass).
//
//   none / ddp_* / zero1   views of the full flat buffers the Model owns (Model::full_view); release of a backward
//                          use on the last microbatch is the moment a unit's gradient is complete (on_unit_ready).
//   fsdp                   weights all-gathered into buffers of their unit's size class (parallel/fsdp_buffers.h),
//                          `prefetch_layers` uses ahead of the model (begin_schedule tells it the order); gradients
//                          written into a staging buffer of that class and reduce-scattered into the shard at
//                          release (with optimizer.in_backward the shard's AdamW step follows once it lands).
//   tensor parallel (next) the view's weights are this rank's slices (columns of Wqkv / W13, rows of Wo / W2); the
//                          model asks UnitView::tp_size and all-reduces the partial outputs before the residual add.
//   pipeline stage (next)  a strategy owning a range of units refuses acquire() outside it; the model's schedule
//                          (unit_schedule) is cut at the stage boundary.
//
// In a backward use the view may also carry a WeightUpdate (optimizer.in_gemm, strategy none): the matrices it takes
// are updated inside their weight-gradient products instead of having their gradient written to grads (on a step's
// last microbatch; the earlier ones' sum, in grads, is added in the same product).
//
// A view's weights tensor covers the unit's whole flat range [layout.unit_begin(u), layout.unit_end(u)), so a
// parameter p of that unit sits at element p.offset - unit_begin(u) of it; grads the same in f32.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace trainer {

/// Why a unit is used. forward: the forward pass (weights only). recompute: a checkpointed segment's forward run
/// again during the backward (weights only). backward: the unit's backward (weights and gradient; the embedding's
/// backward reads no weights: UnitUse::weights false). forward_backward: the LM head's fused forward and backward
/// (chunked logits, loss and gradients in one pass during the forward), weights and gradient.
enum class UnitPass : uint8_t { forward, recompute, backward, forward_backward };
const char* unit_pass_name(UnitPass p);
/// Whether a use of pass `p` writes the unit's gradient (UnitView::grads): backward and forward_backward.
inline bool writes_grads(UnitPass p) { return p == UnitPass::backward || p == UnitPass::forward_backward; }

/// One use of a unit in a step's order of uses.
struct UnitUse {
  int unit = 0;
  UnitPass pass = UnitPass::forward;
  bool weights = true;  // false: the use reads no weights (the embedding's backward); fsdp skips the gather
};

struct ParamInfo;

/// Where a unit's weight matrices go in its backward when the strategy fuses their optimizer step into the product
/// that computes their gradient (optimizer.in_gemm): the Model asks takes(p) for each matrix and then calls
/// update(p, dY, X, g_buf, accumulate) in place of writing p's slice of UnitView::grads with dW = dYᵀ X. The update
/// rewrites the weight (and its working copy), so the Model runs every product that reads the weight before it.
class WeightUpdate {
 public:
  virtual ~WeightUpdate() = default;
  virtual bool takes(const ParamInfo& p) const = 0;
  /// dY [K, M], X [K, N], both the compute dtype: the weight [M, N] starts at p and may span the parameters after it
  /// (q, k, v as one [3D, D] product). g_buf: the matrix's slot in the view's grads (M N elements), or empty where
  /// the view has none (a compact gradient); with `accumulate` it holds the step's earlier microbatches' (or the
  /// head's earlier chunks') sum, which this product adds to. It may be overwritten.
  virtual void update(const ParamInfo& p, const Tensor& dY, const Tensor& X, Tensor g_buf, bool accumulate) = 0;
};

/// Part of a compact unit gradient (UnitView::grad_runs): unit elements [begin, begin + length) (relative to the
/// unit's first element) are at element `at` of UnitView::grads.
struct GradRun {
  int64_t begin = 0, length = 0, at = 0;
};

/// What the model reads and writes during one use of a unit.
struct UnitView {
  Tensor weights;           // compute dtype [unit_end - unit_begin] (bf16 in mixed and bf16_pure, else f32); may be
                            // empty when the use reads no weights
  Tensor grads;             // storage dtype (f32; bf16 for bf16_pure) [unit_end - unit_begin]; backward /
                            // forward_backward uses only
  bool accumulate = false;  // grads already hold an earlier microbatch's sum: the backward adds to them, else it
                            // overwrites them (and zeroes the embedding's rows first, which receive scattered adds)
  WeightUpdate* weight_update = nullptr;  // backward uses: the matrices it takes skip grads (optimizer.in_gemm)
  /// Null: grads covers the whole unit. Else grads holds only these runs (in_gemm: the parameters outside the fused
  /// matrices), and a parameter outside them has no gradient slot.
  const std::vector<GradRun>* grad_runs = nullptr;
};

/// Implemented by every Strategy (parallel/strategy.h); the Model's own full buffers serve when none is attached.
class ParamResidency {
 public:
  virtual ~ParamResidency() = default;
  /// The uses of one microbatch's forward (and backward, when one follows) in the order the model will make them
  /// (Model::unit_schedule). Called at the start of each microbatch's forward. fsdp prefetches along it.
  virtual void begin_schedule(const std::vector<UnitUse>& uses) { (void)uses; }
  /// Unit `unit` is about to be used for `pass`: its weights (and gradient destination). The views stay valid until
  /// release(unit, pass).
  virtual UnitView acquire(int unit, UnitPass pass) = 0;
  /// The last operation of the use is enqueued on the compute stream (events, never host syncs, order later reuse).
  /// For backward / forward_backward uses the unit's gradient for this microbatch is then complete.
  virtual void release(int unit, UnitPass pass) = 0;
};

}  // namespace trainer
