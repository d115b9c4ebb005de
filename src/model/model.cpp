// BasicsTransformerLM forward and backward over the Backend op table. See model.h for the parameter layout and
// DESIGN.md for the model contract (pre-norm blocks, RoPE, causal attention, SwiGLU, untied LM head).
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <thread>

#include "io/safetensors.h"

namespace trainer {

namespace {
constexpr float kNormEps = 1e-5f;

int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

// Counter-based random numbers (splitmix64 finaliser): any element can be drawn independently of the others, so the
// initialisation is the same whatever the number of threads.
uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform01(uint64_t key) { return (double(mix64(key) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// Standard normal truncated to [-3, 3] (rejection), element i of stream `stream`.
float truncated_normal(uint64_t seed, uint64_t stream, uint64_t i) {
  for (uint64_t k = 0;; ++k) {
    const uint64_t base = mix64(seed ^ mix64(stream * 0x100000001b3ull + k)) + i * 2;
    const double u1 = uniform01(base), u2 = uniform01(base + 0x632be59bd9b4e019ull);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);  // Box-Muller
    if (std::fabs(z) <= 3.0) return float(z);
  }
}

template <class F>
void parallel_for(int64_t n, F&& f) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t chunk = std::max<int64_t>(1 << 16, (n + threads - 1) / threads);
  std::vector<std::thread> pool;
  for (int64_t b = 0; b < n; b += chunk) pool.emplace_back([&f, b, e = std::min(n, b + chunk)] { f(b, e); });
  for (auto& t : pool) t.join();
}

float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

// ---- dims, layout, FLOPs -----------------------------------------------------------------------------------------

ModelDims model_dims(const ModelCfg& m) {
  ModelDims d;
  d.vocab_size = m.vocab_size;
  d.context_length = m.context_length;
  d.d_model = m.d_model;
  d.d_ff = m.d_ff;
  d.num_layers = m.num_layers;
  d.num_heads = m.num_heads;
  d.rope_theta = m.rope_theta;
  return d;
}

ParamLayout::ParamLayout(const ModelDims& d) {
  const int64_t V = d.vocab_size, D = d.d_model, F = d.d_ff;
  int64_t off = 0;
  int unit = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool aligned = true) {
    if (aligned) off = align_up(off, kAlign);
    int64_t n = 1;
    for (auto s : shape) n *= s;
    params_.push_back({name, std::move(shape), off, n, unit});
    off += n;
    count_ += n;
  };
  auto begin_unit = [&] {
    off = align_up(off, kAlign);
    unit_begin_.push_back(off);
  };
  auto end_unit = [&] {
    off = align_up(off, kAlign);
    unit_end_.push_back(off);
    ++unit;
  };
  begin_unit();
  add("token_embeddings.weight", {V, D});
  end_unit();
  for (int i = 0; i < d.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    begin_unit();
    add(p + "ln1.weight", {D});
    add(p + "attn.q_proj.weight", {D, D});
    add(p + "attn.k_proj.weight", {D, D}, false);  // contiguous with q: one [3D, D] GEMM
    add(p + "attn.v_proj.weight", {D, D}, false);
    add(p + "attn.output_proj.weight", {D, D});
    add(p + "ln2.weight", {D});
    add(p + "ffn.w1.weight", {F, D});
    add(p + "ffn.w3.weight", {F, D}, false);  // contiguous with w1: one [2F, D] GEMM
    add(p + "ffn.w2.weight", {D, F});
    end_unit();
  }
  begin_unit();
  add("ln_final.weight", {D});
  add("lm_head.weight", {V, D});
  end_unit();
  total_ = off;
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (auto& p : params_)
    if (p.name == name) return p;
  TRAINER_CHECK(false, "no parameter named '{}'", name);
  throw;  // unreachable
}

double forward_flops_per_token(const ModelDims& d) {
  const double D = d.d_model, F = d.d_ff, L = d.num_layers, V = d.vocab_size, T = d.context_length;
  const double matmul_params = L * (4 * D * D + 3 * D * F) + V * D;
  return 2 * matmul_params + 4 * L * T * D;
}

// ---- activation store ----------------------------------------------------------------------------------------------

// Tensors one block keeps from forward for backward (rows N = B*T of the microbatch). The cheap elementwise results
// ln1(x_in), ln2(x_mid) and silu(a) * b are not kept: backward recomputes them (one RMSNorm or SwiGLU pass each,
// ~1.5% of an xl step) and saves 30% of the block's bytes (selective recomputation, as Megatron-LM does for
// attention; Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").
struct Model::BlockActs {
  Tensor x_in;      // [N, D]  block input (residual stream)
  Tensor rstd1;     // [N]     f32
  Tensor qkv;       // [N, 3D] after RoPE
  Tensor attn_out;  // [N, D]  attention output before output_proj
  Tensor lse;       // [B, H, T] f32
  Tensor probs;     // [B, H, T, T] naive attention only
  Tensor x_mid;     // [N, D]  x_in + attention
  Tensor rstd2;     // [N]     f32
  Tensor ab;        // [N, 2F] [w1 h2 | w3 h2]
};

struct Model::HeadActs {
  Tensor x_final;  // [N, D] output of the last block
  Tensor hf;       // [N, D] ln_final(x_final)
  Tensor rstdf;    // [N] f32
  Tensor logits;   // [N, V]; holds dlogits after the fused cross-entropy when backward follows
  // scratch, shared by all blocks: in forward dh holds h1 / h2 and dg holds g; in backward they hold the recomputed
  // h2, g, h1 until the gradients that overwrite them are computed
  Tensor dx, dh, dg, dbig;  // [N, D], [N, D], [N, F], [N, max(3D, 2F)]
};

namespace {
// Carves aligned tensors out of one buffer; with base == nullptr it only measures.
struct Carver {
  char* base;
  Device dev;
  size_t off = 0;
  Tensor take(DType t, std::initializer_list<int64_t> shape) {
    off = (off + 255) / 256 * 256;
    Tensor v(base ? base + off : nullptr, t, dev, shape);
    off += v.bytes();
    return v;
  }
};
}  // namespace

Model::Model(Backend& be, const ModelDims& dims, DType act_dtype, AttnImpl attn, int64_t flat_multiple)
    : be_(be), dims_(dims), layout_(dims), act_dtype_(act_dtype), attn_(attn),
      flat_size_(align_up(layout_.total(), std::max<int64_t>(flat_multiple, 1))),
      head_(std::make_unique<HeadActs>()) {
  for (int l = 0; l < dims_.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layer_refs_.push_back({&layout_.find(p + "ln1.weight"), &layout_.find(p + "attn.q_proj.weight"),
                           &layout_.find(p + "attn.output_proj.weight"), &layout_.find(p + "ln2.weight"),
                           &layout_.find(p + "ffn.w1.weight"), &layout_.find(p + "ffn.w2.weight")});
  }
  emb_ = &layout_.find("token_embeddings.weight");
  ln_final_ = &layout_.find("ln_final.weight");
  lm_head_ = &layout_.find("lm_head.weight");
  const size_t P = size_t(flat_size_);
  params_ = be_.alloc(P * 4, Category::parameters);
  grads_ = be_.alloc(P * 4, Category::gradients);
  be_.fill(params(), 0.f);
  be_.fill(grads(), 0.f);
  if (act_dtype_ != DType::f32) {
    work_ = be_.alloc(P * dtype_size(act_dtype_), Category::parameters);
    be_.fill(params_work(), 0.f);
  }
}

Model::~Model() = default;

Tensor Model::params() const { return params_.view(DType::f32, {flat_size_}); }
Tensor Model::grads() const { return grads_.view(DType::f32, {flat_size_}); }
Tensor Model::params_work() const {
  return act_dtype_ == DType::f32 ? params() : work_.view(act_dtype_, {flat_size_});
}

Tensor Model::w(const ParamInfo& p, const Tensor& flat, std::initializer_list<int64_t> shape) const {
  return flat.slice(p.offset, shape);
}

size_t Model::saved_bytes_per_block(int rows, int seq_len) const {
  Carver c{nullptr, be_.device()};
  const int64_t N = int64_t(rows) * seq_len, D = dims_.d_model, F = dims_.d_ff, H = dims_.num_heads;
  const DType a = act_dtype_;
  c.take(a, {N, D});                        // x_in
  c.take(DType::f32, {N});                  // rstd1
  c.take(a, {N, 3 * D});                    // qkv
  c.take(a, {N, D});                        // attn_out
  c.take(DType::f32, {rows, H, seq_len});   // lse
  if (attn_ == AttnImpl::naive) c.take(a, {rows, H, seq_len, seq_len});  // probs
  c.take(a, {N, D});                        // x_mid
  c.take(DType::f32, {N});                  // rstd2
  c.take(a, {N, 2 * F});                    // ab
  return (c.off + 255) / 256 * 256;
}

void Model::reserve(int rows, int seq_len) {
  if (rows <= cap_rows_ && seq_len == cap_T_) return;
  acts_.reset();
  scratch_.reset();
  blocks_.clear();
  const int64_t N = int64_t(rows) * seq_len, D = dims_.d_model, F = dims_.d_ff, H = dims_.num_heads,
                V = dims_.vocab_size;
  const DType a = act_dtype_;
  auto carve_blocks = [&](Carver& c) {
    std::vector<BlockActs> bl(dims_.num_layers);
    for (auto& b : bl) {
      b.x_in = c.take(a, {N, D});
      b.rstd1 = c.take(DType::f32, {N});
      b.qkv = c.take(a, {N, 3 * D});
      b.attn_out = c.take(a, {N, D});
      b.lse = c.take(DType::f32, {rows, H, seq_len});
      if (attn_ == AttnImpl::naive) b.probs = c.take(a, {rows, H, seq_len, seq_len});
      b.x_mid = c.take(a, {N, D});
      b.rstd2 = c.take(DType::f32, {N});
      b.ab = c.take(a, {N, 2 * F});
    }
    HeadActs h;
    h.x_final = c.take(a, {N, D});
    h.hf = c.take(a, {N, D});
    h.rstdf = c.take(DType::f32, {N});
    h.logits = c.take(a, {N, V});
    return std::make_pair(std::move(bl), h);
  };
  Carver measure{nullptr, be_.device()};
  carve_blocks(measure);
  acts_ = be_.alloc(measure.off, Category::activations);
  Carver c{static_cast<char*>(acts_.data()), be_.device()};
  auto [bl, h] = carve_blocks(c);
  blocks_ = std::move(bl);

  auto carve_scratch = [&](Carver& s, HeadActs& hh) {
    hh.dx = s.take(a, {N, D});
    hh.dh = s.take(a, {N, D});
    hh.dg = s.take(a, {N, F});
    hh.dbig = s.take(a, {N, std::max(3 * D, 2 * F)});
  };
  Carver ms{nullptr, be_.device()};
  HeadActs tmp;
  carve_scratch(ms, tmp);
  scratch_ = be_.alloc(ms.off, Category::workspace);
  Carver sc{static_cast<char*>(scratch_.data()), be_.device()};
  carve_scratch(sc, h);
  *head_ = h;
  cap_rows_ = rows;
  cap_T_ = seq_len;
}

// ---- parameters --------------------------------------------------------------------------------------------------

void Model::init_random(uint64_t seed) {
  const auto& ps = layout_.params();
  std::vector<float> host;
  for (size_t k = 0; k < ps.size(); ++k) {
    const ParamInfo& p = ps[k];
    host.resize(size_t(p.numel));
    if (p.shape.size() == 1) {
      std::fill(host.begin(), host.end(), 1.f);  // RMSNorm gains
    } else {
      // Embedding: N(0, 1) truncated at ±3. Linear [d_out, d_in]: N(0, 2/(d_in+d_out)) truncated at ±3 std.
      const bool embedding = p.name == "token_embeddings.weight";
      const float std = embedding ? 1.f : float(std::sqrt(2.0 / double(p.shape[0] + p.shape[1])));
      float* out = host.data();
      parallel_for(p.numel, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = std * truncated_normal(seed, k, uint64_t(i));
      });
    }
    be_.copy_from_host(static_cast<float*>(params_.data()) + p.offset, host.data(), host.size() * 4);
  }
  sync_work_copy();
}

void Model::load(const std::map<std::string, HostTensor>& tensors, const std::string& source) {
  std::vector<float> host;
  for (const ParamInfo& p : layout_.params()) {
    auto it = tensors.find(p.name);
    CONFIG_CHECK(it != tensors.end(), "init.weights: '{}' has no tensor '{}'", source, p.name);
    const HostTensor& t = it->second;
    CONFIG_CHECK(t.shape == p.shape, "init.weights: '{}': tensor '{}' has shape [{}], the model needs [{}]", source,
                 p.name, fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
    host.resize(size_t(p.numel));
    if (t.dtype == "F32") {
      std::memcpy(host.data(), t.bytes.data(), host.size() * 4);
    } else if (t.dtype == "F64") {
      const double* d = reinterpret_cast<const double*>(t.bytes.data());
      for (size_t i = 0; i < host.size(); ++i) host[i] = float(d[i]);
    } else if (t.dtype == "BF16") {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(t.bytes.data());
      for (size_t i = 0; i < host.size(); ++i) host[i] = bf16_to_float(h[i]);
    } else {
      throw ConfigError(fmt::format("init.weights: '{}': tensor '{}' has dtype {}; F32, F64 or BF16 expected", source,
                                    p.name, t.dtype));
    }
    be_.copy_from_host(static_cast<float*>(params_.data()) + p.offset, host.data(), host.size() * 4);
  }
  for (auto& [name, t] : tensors) {
    bool known = false;
    for (const ParamInfo& p : layout_.params()) known = known || p.name == name;
    if (!known) spdlog::warn("init.weights: '{}': ignoring tensor '{}' (not a model parameter)", source, name);
  }
  sync_work_copy();
}

std::vector<float> Model::download(const ParamInfo& p, bool grad) const {
  std::vector<float> host(size_t(p.numel));
  const Buffer& b = grad ? grads_ : params_;
  be_.copy_to_host(host.data(), static_cast<const float*>(b.data()) + p.offset, host.size() * 4);
  return host;
}

void Model::sync_work_copy() {
  if (act_dtype_ != DType::f32) be_.cast(params_work(), params());
}

UnitView Model::full_view(int unit, UnitPass pass) {
  const int64_t b = layout_.unit_begin(unit), n = layout_.unit_end(unit) - b;
  if (unit_written_.size() != size_t(layout_.num_units())) unit_written_.assign(size_t(layout_.num_units()), false);
  UnitView v;
  v.weights = params_work().slice(b, {n});
  if (pass == UnitPass::backward || pass == UnitPass::forward_backward) {
    v.grads = grads().slice(b, {n});
    v.accumulate = unit_written_[size_t(unit)];
  }
  return v;
}

void Model::full_release(int unit, UnitPass pass) {
  if (unit_written_.size() != size_t(layout_.num_units())) unit_written_.assign(size_t(layout_.num_units()), false);
  if (pass == UnitPass::backward || pass == UnitPass::forward_backward) unit_written_[size_t(unit)] = true;
}

void Model::zero_grads() {
  unit_written_.assign(size_t(layout_.num_units()), false);
  // The next backward writes instead of accumulating (grad_beta_ = 0: the weight-gradient GEMMs with beta 0, the
  // RMSNorm gains with accumulate_dw false), so only the embedding, whose rows receive scattered adds, is zeroed
  // here. The layout's padding is never written and stays zero from construction.
  grad_beta_ = 0.f;
  be_.fill(w(*emb_, grads(), {emb_->numel}), 0.f);
}

void Model::begin_step_losses(int64_t tokens) {
  if (tokens > loss_capacity_) {
    losses_.reset();
    tokens_.reset();
    losses_ = be_.alloc(size_t(tokens) * 4, Category::activations);
    tokens_ = be_.alloc(size_t(tokens) * 2 * 4, Category::activations);
    loss_capacity_ = tokens;
  }
  loss_used_ = tokens;
  be_.fill(losses_.view(DType::f32, {tokens}), 0.f);
}

void Model::set_step_tokens(const int32_t* inputs, const int32_t* targets) {
  int32_t* d = static_cast<int32_t*>(tokens_.data());
  be_.copy_from_host(d, inputs, size_t(loss_used_) * 4);
  be_.copy_from_host(d + loss_capacity_, targets, size_t(loss_used_) * 4);
}

double Model::step_loss_sum() { return be_.sum(losses_.view(DType::f32, {loss_used_})); }

// Views of a block's activations resized to a microbatch of `rows` (<= the reserved capacity).
Model::BlockActs Model::sized(const BlockActs& f, int rows, int T) const {
  const int64_t N = int64_t(rows) * T, D = dims_.d_model, F = dims_.d_ff, H = dims_.num_heads;
  BlockActs a;
  a.x_in = f.x_in.slice(0, {N, D});
  a.rstd1 = f.rstd1.slice(0, {N});
  a.qkv = f.qkv.slice(0, {N, 3 * D});
  a.attn_out = f.attn_out.slice(0, {N, D});
  a.lse = f.lse.slice(0, {rows, H, T});
  if (f.probs.data) a.probs = f.probs.slice(0, {rows, H, T, T});
  a.x_mid = f.x_mid.slice(0, {N, D});
  a.rstd2 = f.rstd2.slice(0, {N});
  a.ab = f.ab.slice(0, {N, 2 * F});
  return a;
}

// ---- forward -----------------------------------------------------------------------------------------------------

void Model::layer_forward(int l, const Tensor& x_in, Tensor x_out, BlockActs& a, const AttnShape& s) {
  const LayerRefs& r = layer_refs_[l];
  const Tensor W = params_work();
  const int64_t D = dims_.d_model, F = dims_.d_ff;
  const Tensor ln1 = w(*r.ln1, W, {D}), wqkv = w(*r.wqkv, W, {3 * D, D}), wo = w(*r.wo, W, {D, D}),
               ln2 = w(*r.ln2, W, {D}), w13 = w(*r.w13, W, {2 * F, D}), w2 = w(*r.w2, W, {D, F});
  const int64_t N = x_in.rows();
  const Tensor h = head_->dh.slice(0, {N, D}), g = head_->dg.slice(0, {N, F});  // not kept (recomputed)

  be_.rmsnorm_fwd(h, a.rstd1, x_in, ln1, kNormEps);
  be_.matmul(a.qkv, h, false, wqkv, true, 1.f, 0.f);  // [N, 3D] = h1 Wqkvᵀ
  be_.rope(a.qkv, s, float(dims_.rope_theta), false);
  be_.attention_fwd(attn_, s, a.attn_out, a.lse, a.probs, a.qkv);
  be_.matmul_add(a.x_mid, a.attn_out, false, wo, true, x_in);  // x_mid = x_in + attn Woᵀ
  be_.rmsnorm_fwd(h, a.rstd2, a.x_mid, ln2, kNormEps);
  be_.matmul(a.ab, h, false, w13, true, 1.f, 0.f);  // [N, 2F] = h2 [W1; W3]ᵀ
  be_.swiglu_fwd(g, a.ab);
  be_.matmul_add(x_out, g, false, w2, true, a.x_mid);  // x_out = x_mid + g W2ᵀ
}

void Model::forward(const int32_t* inputs, const int32_t* targets, int rows, int seq_len, bool backward_next,
                    float dscale, int64_t loss_slot) {
  const int64_t N = int64_t(rows) * seq_len;
  TRAINER_CHECK(loss_slot >= 0 && loss_slot + N <= loss_used_, "loss slot {}+{} outside the step's {} losses",
                loss_slot, N, loss_used_);
  int32_t* d = static_cast<int32_t*>(tokens_.data());
  be_.copy_from_host(d + loss_slot, inputs, size_t(N) * 4);
  be_.copy_from_host(d + loss_capacity_ + loss_slot, targets, size_t(N) * 4);
  forward(loss_slot, rows, seq_len, backward_next, dscale);
}

void Model::forward(int64_t offset, int rows, int seq_len, bool backward_next, float dscale) {
  reserve(rows, seq_len);
  rows_ = rows;
  T_ = seq_len;
  const int64_t N = int64_t(rows) * seq_len, D = dims_.d_model, V = dims_.vocab_size;
  TRAINER_CHECK(offset >= 0 && offset + N <= loss_used_, "tokens {}+{} outside the step's {} tokens", offset, N,
                loss_used_);
  HeadActs& h = *head_;
  const Tensor step_tokens(tokens_.data(), DType::i32, be_.device(), {2 * loss_capacity_});
  const Tensor inp = step_tokens.slice(offset, {N}), tgt = step_tokens.slice(loss_capacity_ + offset, {N});
  cur_inputs_ = inp;

  const AttnShape s{rows, seq_len, dims_.num_heads, dims_.d_head(), true, float(1.0 / std::sqrt(dims_.d_head()))};
  const Tensor W = params_work();
  const int L = dims_.num_layers;
  auto resid = [&](int l) { return (l < L ? blocks_[l].x_in : h.x_final).slice(0, {N, D}); };
  be_.embedding_fwd(resid(0), inp, w(*emb_, W, {V, D}));
  for (int l = 0; l < L; ++l) {
    ScopedRange range(be_, "block", "block", l);
    BlockActs a = sized(blocks_[l], rows, seq_len);
    layer_forward(l, resid(l), resid(l + 1), a, s);
  }
  ScopedRange range(be_, "lm_head", "block");
  const Tensor hf = h.hf.slice(0, {N, D}), rstdf = h.rstdf.slice(0, {N}), logits = h.logits.slice(0, {N, V});
  be_.rmsnorm_fwd(hf, rstdf, resid(L), w(*ln_final_, W, {D}), kNormEps);
  be_.matmul(logits, hf, false, w(*lm_head_, W, {V, D}), true, 1.f, 0.f);
  const Tensor losses = losses_.view(DType::f32, {loss_used_}).slice(offset, {N});
  be_.cross_entropy(losses, backward_next ? logits : Tensor(), logits, tgt, dscale);
}

// ---- backward ----------------------------------------------------------------------------------------------------

void Model::layer_backward(int l, Tensor dx, BlockActs& a, const AttnShape& s) {
  const LayerRefs& r = layer_refs_[l];
  const Tensor W = params_work(), G = grads();
  const int64_t N = dx.rows(), D = dims_.d_model, F = dims_.d_ff;
  const ParamInfo &ln1 = *r.ln1, &wqkv = *r.wqkv, &wo = *r.wo, &ln2 = *r.ln2, &w13 = *r.w13, &w2 = *r.w2;
  HeadActs& h = *head_;
  const Tensor dh = h.dh.slice(0, {N, D}), dg = h.dg.slice(0, {N, F});
  const Tensor dab = h.dbig.slice(0, {N, 2 * F}), dqkv = h.dbig.slice(0, {N, 3 * D});

  const float gb = grad_beta_;  // 0 on the step's first backward (weight gradients written), else 1 (accumulated)
  const bool acc = gb != 0.f;
  // FFN: x_out = x_mid + g W2ᵀ. g is recomputed by swiglu_bwd into dg's buffer (after reading dg), h2 and later h1
  // into the dh scratch, which their gradients then overwrite.
  const Tensor hr = dh;
  be_.matmul(dg, dx, false, w(w2, W, {D, F}), false, 1.f, 0.f);  // dg [N, F] = dx W2
  be_.swiglu_bwd(dab, dg, a.ab, dg);                              // dab; dg := g = silu(a) * b
  be_.matmul(w(w2, G, {D, F}), dx, true, dg, false, 1.f, gb);     // dW2 (+)= dxᵀ g
  be_.rmsnorm_fwd(hr, a.rstd2, a.x_mid, w(ln2, W, {D}), kNormEps);        // h2 again (rstd2 rewritten, same values)
  be_.matmul(w(w13, G, {2 * F, D}), dab, true, hr, false, 1.f, gb);       // d[W1; W3] (+)= dabᵀ h2
  be_.matmul(dh, dab, false, w(w13, W, {2 * F, D}), false, 1.f, 0.f);    // dh2 = dab [W1; W3]
  be_.rmsnorm_bwd(dx, w(ln2, G, {D}), dh, a.x_mid, w(ln2, W, {D}), a.rstd2, acc);  // dx := d x_mid
  // Attention: x_mid = x_in + attn_out Woᵀ
  const Tensor d_attn = dh;  // reuse [N, D]
  be_.matmul(d_attn, dx, false, w(wo, W, {D, D}), false, 1.f, 0.f);
  be_.matmul(w(wo, G, {D, D}), dx, true, a.attn_out, false, 1.f, gb);
  be_.attention_bwd(attn_, s, dqkv, d_attn, a.qkv, a.attn_out, a.lse, a.probs);
  be_.rope(dqkv, s, float(dims_.rope_theta), true);  // d(pre-RoPE) = Rᵀ d(post-RoPE)
  be_.rmsnorm_fwd(hr, a.rstd1, a.x_in, w(ln1, W, {D}), kNormEps);           // h1 again
  be_.matmul(w(wqkv, G, {3 * D, D}), dqkv, true, hr, false, 1.f, gb);       // dWqkv (+)= dqkvᵀ h1
  be_.matmul(dh, dqkv, false, w(wqkv, W, {3 * D, D}), false, 1.f, 0.f);    // dh1 = dqkv Wqkv
  be_.rmsnorm_bwd(dx, w(ln1, G, {D}), dh, a.x_in, w(ln1, W, {D}), a.rstd1, acc);  // dx := d x_in
}

void Model::backward(const std::function<void(int)>& on_unit_ready) {
  const int rows = rows_, T = T_, L = dims_.num_layers;
  const int64_t N = int64_t(rows) * T, D = dims_.d_model, V = dims_.vocab_size;
  const AttnShape s{rows, T, dims_.num_heads, dims_.d_head(), true, float(1.0 / std::sqrt(dims_.d_head()))};
  HeadActs& h = *head_;
  const Tensor W = params_work(), G = grads();
  const Tensor dlogits = h.logits.slice(0, {N, V}), hf = h.hf.slice(0, {N, D}), dx = h.dx.slice(0, {N, D}),
               dh = h.dh.slice(0, {N, D});
  const ParamInfo &lm = *lm_head_, &lnf = *ln_final_;
  std::optional<ScopedRange> head_range(std::in_place, be_, "lm_head", "block");
  be_.matmul(dh, dlogits, false, w(lm, W, {V, D}), false, 1.f, 0.f);   // dhf = dlogits Wlm
  be_.matmul(w(lm, G, {V, D}), dlogits, true, hf, false, 1.f, grad_beta_);  // dWlm (+)= dlogitsᵀ hf
  be_.fill(dx, 0.f);
  be_.rmsnorm_bwd(dx, w(lnf, G, {D}), dh, h.x_final.slice(0, {N, D}), w(lnf, W, {D}), h.rstdf.slice(0, {N}),
                  /*accumulate_dw=*/grad_beta_ != 0.f);
  head_range.reset();
  auto unit_done = [&](int u) {
    if (on_unit_ready) on_unit_ready(u);
    else if (residency_) residency_->release(u, UnitPass::backward);
  };
  unit_done(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    {
      ScopedRange range(be_, "block", "block", l);
      BlockActs a = sized(blocks_[l], rows, T);
      layer_backward(l, dx, a, s);
    }
    unit_done(l + 1);
  }
  be_.embedding_bwd(w(*emb_, G, {V, D}), cur_inputs_, dx);
  grad_beta_ = 1.f;  // later microbatches of the step accumulate
  unit_done(0);
}

}  // namespace trainer
