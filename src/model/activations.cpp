#include "model/activations.h"

#include <algorithm>
#include <cmath>

namespace trainer {

const char* saved_kind_name(SavedKind k) {
  switch (k) {
    case SavedKind::input: return "input";
    case SavedKind::kept: return "kept";
    case SavedKind::elementwise: return "elementwise";
  }
  return "?";
}

size_t SavedTensorSpec::bytes() const {
  size_t n = dtype_size(dtype);
  for (int i = 0; i < ndim; ++i) n *= size_t(shape[size_t(i)]);
  return n;
}

std::vector<SavedTensorSpec> block_saved_tensors(int64_t D, int64_t F, int H, DType act, bool naive_attention,
                                                 int rows, int T) {
  const int64_t N = int64_t(rows) * T;
  using K = SavedKind;
  std::vector<SavedTensorSpec> t = {
      {"x_in", K::input, act, 2, {N, D, 1, 1}},
      {"h1", K::elementwise, act, 2, {N, D, 1, 1}},
      {"rstd1", K::kept, DType::f32, 1, {N, 1, 1, 1}},
      {"qkv", K::kept, act, 2, {N, 3 * D, 1, 1}},
      {"attn_out", K::kept, act, 2, {N, D, 1, 1}, true},
      {"lse", K::kept, DType::f32, 3, {rows, H, T, 1}, true},
  };
  if (naive_attention) t.push_back({"probs", K::kept, act, 4, {rows, H, T, T}, true});
  const std::vector<SavedTensorSpec> rest = {
      {"x_mid", K::kept, act, 2, {N, D, 1, 1}},
      {"h2", K::elementwise, act, 2, {N, D, 1, 1}},
      {"rstd2", K::kept, DType::f32, 1, {N, 1, 1, 1}},
      {"ab", K::kept, act, 2, {N, 2 * F, 1, 1}},
      {"g", K::elementwise, act, 2, {N, F, 1, 1}},
  };
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

size_t store_bytes(const std::vector<SavedTensorSpec>& table, bool with_input, bool with_elementwise) {
  size_t off = 0;
  for (const SavedTensorSpec& s : table) {
    if (s.kind == SavedKind::input && !with_input) continue;
    if (s.kind == SavedKind::elementwise && !with_elementwise) continue;
    off = (off + 255) / 256 * 256 + s.bytes();
  }
  return (off + 255) / 256 * 256;
}

ActivationPolicy ActivationPolicy::from(const CheckpointingCfg& c) {
  ActivationPolicy p;
  p.policy = c.policy;
  p.k = c.k;
  p.blocks = c.blocks;
  p.lm_head_chunk_tokens = c.lm_head_chunk_tokens;
  p.keep_attention = c.keep_attention;
  return p;
}

std::vector<Segment> ActivationPolicy::segments(int L) const {
  const bool keeping = policy == "none" || policy == "selective";
  std::vector<bool> ckpt(size_t(L), !keeping);
  if (blocks) {
    ckpt.assign(size_t(L), false);
    for (int b : *blocks)
      if (b >= 0 && b < L) ckpt[size_t(b)] = true;
  }
  int k = 1;
  if (policy == "every_k") k = std::max(1, this->k);
  if (policy == "sqrt") k = std::max(1, int(std::lround(std::sqrt(double(L)))));
  std::vector<Segment> out;
  for (int l = 0; l < L;) {
    if (!ckpt[size_t(l)]) {
      out.push_back({l, l + 1, Segment::Kind::stored});
      ++l;
      continue;
    }
    int run_end = l;
    while (run_end < L && ckpt[size_t(run_end)]) ++run_end;
    if (policy == "nested") {
      out.push_back({l, run_end, Segment::Kind::nested});
    } else {
      for (int a = l; a < run_end; a += k) out.push_back({a, std::min(run_end, a + k), Segment::Kind::flat});
    }
    l = run_end;
  }
  return out;
}

int64_t lm_head_chunk_rows(int64_t N, int64_t vocab, int64_t d_model, DType act, int chunk_tokens) {
  if (chunk_tokens > 0) return std::max<int64_t>(1, std::min<int64_t>(N, chunk_tokens));
  // 1 GiB of head buffers per chunk (Model::head: hf [C, D], rstd [C] f32, logits [C, V], dhf [C, D]; 4 KiB left for
  // their alignment): each chunk after the first reads and writes the head's fp32 weight gradient [V, D] once more
  // (dW += ...), so chunks should be few. The 8B shape (V 151936, D 4096, 32768 tokens): 3328-token chunks, 10 of
  // them, the head category 0.993 GiB; 2560-token chunks (768 MiB of logits) took 2-5 ms more of a 690 ms 4-block
  // step, 768-token chunks 50 ms more (results/NOTES.md v8, v11).
  const int64_t budget = (int64_t(1) << 30) - 4096;
  const int64_t per_row = (vocab + 2 * d_model) * int64_t(dtype_size(act)) + 4;
  const int64_t rows = budget / std::max<int64_t>(1, per_row) / 128 * 128;
  return std::max<int64_t>(1, std::min<int64_t>(N, std::max<int64_t>(128, rows)));
}

}  // namespace trainer
