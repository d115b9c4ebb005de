// BasicsTransformerLM forward and backward over the Backend op table. See model.h for the parameter layout and
// DESIGN.md for the model contract (pre-norm blocks, RoPE, causal attention, SwiGLU, untied LM head).
#include "model/model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>

#include "backend/bf16.h"
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
  // joined: the matrix follows the one before it in memory (no alignment gap) and in its weight-gradient product
  size_t product = 0;  // the parameter that starts the product being laid out
  auto add = [&](const std::string& name, std::vector<int64_t> shape, bool joined = false) {
    if (!joined) off = align_up(off, kAlign);
    int64_t n = 1;
    for (auto s : shape) n *= s;
    const bool matrix = shape.size() == 2;
    params_.push_back({name, std::move(shape), off, n, unit, matrix && !joined ? n : 0});
    if (matrix && !joined) product = params_.size() - 1;
    if (joined) params_[product].product_numel += n;
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
    add(p + "attn.k_proj.weight", {D, D}, true);  // contiguous with q: one [3D, D] GEMM
    add(p + "attn.v_proj.weight", {D, D}, true);
    add(p + "attn.output_proj.weight", {D, D});
    add(p + "ln2.weight", {D});
    add(p + "ffn.w1.weight", {F, D});
    add(p + "ffn.w3.weight", {F, D}, true);  // contiguous with w1: one [2F, D] GEMM
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

// A block's activations as views. What the policy keeps (model/activations.h: the table) points into the block's
// store, an allocation of its own made by its forward (or recompute) and freed by its backward; the elementwise
// results a store does not keep point into the shared scratch, where the backward recomputes them.
struct Model::BlockActs {
  Tensor x_in, h1, rstd1, qkv, attn_out, lse, probs, x_mid, h2, rstd2, ab, g;
  bool elementwise_kept = false;
  bool attention_done = false;  // attn_out and lse already hold this block's values (checkpointing.keep_attention)
  /// The field of saved tensor `name` of the table (activations.h); raises for a name without one.
  Tensor& field(std::string_view n) {
    Tensor* f = n == "x_in" ? &x_in : n == "h1" ? &h1 : n == "rstd1" ? &rstd1 : n == "qkv" ? &qkv
              : n == "attn_out" ? &attn_out : n == "lse" ? &lse : n == "probs" ? &probs : n == "x_mid" ? &x_mid
              : n == "h2" ? &h2 : n == "rstd2" ? &rstd2 : n == "ab" ? &ab : n == "g" ? &g : nullptr;
    TRAINER_CHECK(f != nullptr, "Model: saved tensor '{}' has no field", n);
    return *f;
  }
};

// The backward's running gradient and temporaries, shared by all blocks: dx [N, D], dh [N, D], dg [N, max(D, F)],
// dbig [N, max(3D, 2F)]. In the forward dh holds h1 / h2 and dg holds g when the store does not keep them; in the
// backward dg holds the recomputed g, then h2 and h1 (dh receives dh2 and dh1 meanwhile).
struct Model::Scratch {
  Tensor dx, dh, dg, dbig;
};

namespace {
Tensor make_view(void* p, DType t, Device dev, int ndim, const std::array<int64_t, 4>& s) {
  switch (ndim) {
    case 1: return Tensor(p, t, dev, {s[0]});
    case 2: return Tensor(p, t, dev, {s[0], s[1]});
    case 3: return Tensor(p, t, dev, {s[0], s[1], s[2]});
    default: return Tensor(p, t, dev, {s[0], s[1], s[2], s[3]});
  }
}

// Carves 256-B aligned tensors out of one buffer; with base == nullptr it only measures.
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
  Tensor take(const SavedTensorSpec& s) {
    off = (off + 255) / 256 * 256;
    Tensor v = make_view(base ? base + off : nullptr, s.dtype, dev, s.ndim, s.shape);
    off += v.bytes();
    return v;
  }
};
}  // namespace

Model::Model(Backend& be, const ModelDims& dims, DType act_dtype, AttnImpl attn, int64_t flat_multiple,
             ParamStorage storage, ActivationPolicy policy)
    : be_(be), dims_(dims), layout_(dims), act_dtype_(act_dtype), attn_(attn), policy_(std::move(policy)),
      param_dtype_(storage.dtype),
      segments_(policy_.segments(dims.num_layers)),
      flat_size_(align_up(layout_.total(), std::max<int64_t>(flat_multiple, 1))),
      scratch_(std::make_unique<Scratch>()) {
  for (int l = 0; l < dims_.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    layer_refs_.push_back({&layout_.find(p + "ln1.weight"), &layout_.find(p + "attn.q_proj.weight"),
                           &layout_.find(p + "attn.output_proj.weight"), &layout_.find(p + "ln2.weight"),
                           &layout_.find(p + "ffn.w1.weight"), &layout_.find(p + "ffn.w2.weight")});
  }
  emb_ = &layout_.find("token_embeddings.weight");
  ln_final_ = &layout_.find("ln_final.weight");
  lm_head_ = &layout_.find("lm_head.weight");
  x_.resize(size_t(dims_.num_layers) + 1);
  x_alive_.assign(size_t(dims_.num_layers) + 1, false);
  store_.resize(size_t(dims_.num_layers));
  attn_kept_.resize(size_t(dims_.num_layers));
  unit_written_.assign(size_t(layout_.num_units()), false);
  TRAINER_CHECK(param_dtype_ == DType::f32 || param_dtype_ == DType::bf16, "Model: parameter dtype {} (f32 or bf16)",
                dtype_name(param_dtype_));
  if (!storage.full_params) return;
  const size_t P = size_t(flat_size_), es = dtype_size(param_dtype_);
  params_ = be_.alloc(P * es, Category::parameters);
  be_.fill(params(), 0.f);
  if (storage.full_grads) {
    grads_ = be_.alloc(P * es, Category::gradients);
    be_.fill(grads(), 0.f);
  }
  if (act_dtype_ != param_dtype_ && param_dtype_ == DType::f32) {  // mixed precision: the bf16 working copy
    work_ = be_.alloc(P * dtype_size(act_dtype_), Category::parameters);
    be_.fill(params_work(), 0.f);
  }
}

Model::~Model() = default;

Tensor Model::params() const {
  TRAINER_CHECK(params_, "Model::params: this model keeps no full parameters (the strategy shards them)");
  return params_.view(param_dtype_, {flat_size_});
}
Tensor Model::grads() const {
  TRAINER_CHECK(grads_, "Model::grads: this model keeps no full gradients (the strategy keeps them)");
  return grads_.view(param_dtype_, {flat_size_});
}
Tensor Model::params_work() const {
  TRAINER_CHECK(params_, "Model::params_work: this model keeps no full parameters (the strategy shards them)");
  return work_ ? work_.view(act_dtype_, {flat_size_}) : params();
}

Tensor Model::w(const ParamInfo& p, const UnitView& v, std::initializer_list<int64_t> shape) const {
  return v.weights.slice(p.offset - layout_.unit_begin(p.unit), shape);
}
Tensor Model::g(const ParamInfo& p, const UnitView& v, std::initializer_list<int64_t> shape) const {
  const int64_t off = p.offset - layout_.unit_begin(p.unit);
  if (!v.grad_runs) return v.grads.slice(off, shape);
  for (const GradRun& r : *v.grad_runs)
    if (off >= r.begin && off + p.numel <= r.begin + r.length) return v.grads.slice(r.at + off - r.begin, shape);
  TRAINER_CHECK(false, "Model: {} has no gradient slot in this unit's compact gradient", p.name);
  return {};
}

void Model::weight_grad(const UnitView& v, const ParamInfo& p, int64_t rows, int64_t cols, const Tensor& dY,
                        const Tensor& X, float gb) {
  if (v.weight_update && v.weight_update->takes(p)) {  // gb 1: the earlier microbatches' sum is in the view's grads
    // its slot, where the view has one (a compact gradient has none): the product's scratch, or the sum it adds to
    v.weight_update->update(p, dY, X, v.grad_runs ? Tensor() : g(p, v, {rows * cols}), gb != 0.f);
  } else {
    be_.matmul(g(p, v, {rows, cols}), dY, true, X, false, 1.f, gb);
  }
}

std::vector<SavedTensorSpec> Model::table(int rows, int T) const {
  return block_saved_tensors(dims_.d_model, dims_.d_ff, dims_.num_heads, act_dtype_, attn_ == AttnImpl::naive, rows,
                             T);
}

size_t Model::saved_bytes_per_block(int rows, int seq_len) const {
  return store_bytes(table(rows, seq_len), /*with_input=*/true, policy_.keep_elementwise());
}

Model::BlockActs Model::carve(char* store, const Tensor& x_in, int rows, int T, bool with_elementwise) const {
  const int64_t N = int64_t(rows) * T, D = dims_.d_model, F = dims_.d_ff;
  BlockActs a;
  a.x_in = x_in;
  a.elementwise_kept = with_elementwise;
  Carver c{store, be_.device()};
  for (const SavedTensorSpec& s : table(rows, T)) {
    if (s.kind == SavedKind::input) continue;
    const std::string_view n = s.name;
    Tensor& f = a.field(n);
    if (s.kind == SavedKind::elementwise && !with_elementwise) {  // recomputed: a scratch view
      f = n == "g" ? scratch_->dg.slice(0, {N, F}) : scratch_->dh.slice(0, {N, D});
    } else {
      f = c.take(s);
    }
  }
  return a;
}

void Model::reserve(int rows, int seq_len) {
  if (rows <= cap_rows_ && seq_len == cap_T_) return;
  free_activations();
  scratch_buf_.reset();
  const int64_t N = int64_t(rows) * seq_len, D = dims_.d_model, F = dims_.d_ff;
  const DType a = act_dtype_;
  auto carve_scratch = [&](Carver& s, Scratch& h) {
    h.dx = s.take(a, {N, D});
    h.dh = s.take(a, {N, D});
    h.dg = s.take(a, {N, std::max(D, F)});  // [N, F]; the backward's recomputed h2 / h1 [N, D] too
    h.dbig = s.take(a, {N, std::max(3 * D, 2 * F)});
  };
  Carver measure{nullptr, be_.device()};
  Scratch tmp;
  carve_scratch(measure, tmp);
  scratch_buf_ = be_.alloc(measure.off, Category::workspace);
  Carver sc{static_cast<char*>(scratch_buf_.data()), be_.device()};
  carve_scratch(sc, *scratch_);
  cap_rows_ = rows;
  cap_T_ = seq_len;
}

Tensor Model::x(int l) const {
  return x_[size_t(l)].view(act_dtype_, {int64_t(rows_) * T_, dims_.d_model});
}

void Model::alloc_x(int l) {
  x_alive_[size_t(l)] = true;
  if (recording_ || x_[size_t(l)]) return;
  x_[size_t(l)] = be_.alloc(size_t(rows_) * size_t(T_) * size_t(dims_.d_model) * dtype_size(act_dtype_),
                            Category::activations);
}

void Model::free_x(int l) {
  x_alive_[size_t(l)] = false;
  if (!recording_) x_[size_t(l)].reset();
}

void Model::free_activations() {
  for (auto& b : store_) b.reset();
  for (auto& b : attn_kept_) b.reset();
  for (auto& b : x_) b.reset();
  x_alive_.assign(x_alive_.size(), false);
  backward_ready_ = false;
}

// ---- parameters --------------------------------------------------------------------------------------------------

std::vector<float> Model::initial_values(const ParamInfo& p) const {
  std::vector<float> host(size_t(p.numel));
  if (init_tensors_) {
    const HostTensor& t = init_tensors_->at(p.name);  // load() checked names, shapes and dtypes
    if (t.dtype == "F32") {
      std::memcpy(host.data(), t.bytes.data(), host.size() * 4);
    } else if (t.dtype == "F64") {
      const double* d = reinterpret_cast<const double*>(t.bytes.data());
      for (size_t i = 0; i < host.size(); ++i) host[i] = float(d[i]);
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(t.bytes.data());
      for (size_t i = 0; i < host.size(); ++i) host[i] = bf16_bits::to_f32(h[i]);
    }
    return host;
  }
  TRAINER_CHECK(init_seed_.has_value(), "Model::initial_values: no weight source (init_random or load first)");
  if (p.shape.size() == 1) {
    std::fill(host.begin(), host.end(), 1.f);  // RMSNorm gains
    return host;
  }
  // Embedding: N(0, 1) truncated at ±3. Linear [d_out, d_in]: N(0, 2/(d_in+d_out)) truncated at ±3 std. The stream
  // is the parameter's index in the layout, so every parameter draws independently of the others.
  const auto& ps = layout_.params();
  const uint64_t stream = uint64_t(&p - ps.data());
  TRAINER_CHECK(stream < ps.size(), "Model::initial_values: '{}' is not a parameter of this model's layout", p.name);
  const bool embedding = p.name == "token_embeddings.weight";
  const float std = embedding ? 1.f : float(std::sqrt(2.0 / double(p.shape[0] + p.shape[1])));
  float* out = host.data();
  const uint64_t seed = *init_seed_;
  parallel_for(p.numel, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = std * truncated_normal(seed, stream, uint64_t(i));
  });
  return host;
}

void Model::init_random(uint64_t seed) {
  init_tensors_.reset();
  init_seed_ = seed;
  if (!params_) return;
  for (const ParamInfo& p : layout_.params()) upload(p, initial_values(p));
  sync_work_copy();
}

void check_weight_tensors(const ParamLayout& layout, const std::map<std::string, HostTensor>& tensors,
                          const std::string& source, const std::string& key) {
  for (const ParamInfo& p : layout.params()) {
    auto it = tensors.find(p.name);
    CONFIG_CHECK(it != tensors.end(), "{}: '{}' has no tensor '{}'", key, source, p.name);
    const HostTensor& t = it->second;
    CONFIG_CHECK(t.shape == p.shape, "{}: '{}': tensor '{}' has shape [{}], the model needs [{}]", key, source,
                 p.name, fmt::join(t.shape, ", "), fmt::join(p.shape, ", "));
    if (t.dtype != "F32" && t.dtype != "F64" && t.dtype != "BF16")
      throw ConfigError(fmt::format("{}: '{}': tensor '{}' has dtype {}; F32, F64 or BF16 expected", key, source,
                                    p.name, t.dtype));
  }
  if (tensors.size() == layout.params().size()) return;  // every tensor is a parameter (names are unique)
  std::vector<std::string> extra;  // as PyTorch's load_state_dict(strict=True): weights of a larger model are refused
  for (const auto& [name, t] : tensors) {
    bool known = false;
    for (const ParamInfo& p : layout.params()) known = known || p.name == name;
    if (!known) extra.push_back(name);
  }
  std::string names;
  for (size_t i = 0; i < std::min<size_t>(extra.size(), 3); ++i) names += fmt::format("{}'{}'", i ? ", " : "", extra[i]);
  if (extra.size() > 3) names += fmt::format(" and {} more", extra.size() - 3);
  throw ConfigError(fmt::format("{}: '{}' holds {} tensor{} the model does not have ({}): weights of another model?",
                                key, source, extra.size(), extra.size() == 1 ? "" : "s", names));
}

void check_weights_file(const ModelCfg& m, const std::string& path, const std::string& key) {
  std::map<std::string, HostTensor> header;
  try {
    header = read_safetensors_header(path);
  } catch (const ConfigError& e) {  // named by its key, as the job's read names it
    throw ConfigError(fmt::format("{}: {}", key, e.what()));
  }
  check_weight_tensors(ParamLayout(model_dims(m)), header, path, key);
}

namespace {

// The first element of t (F32, F64 or BF16; n elements) that is not finite once rounded to fp32 (the value the model
// takes) and, where `bf16_storage` (bf16_pure), once more to bf16 (an fp32 value within 0.4% of its largest becomes
// inf there); -1 if none. Host threads over the elements, as init_random.
int64_t first_non_finite(const HostTensor& t, int64_t n, bool bf16_storage) {
  const char* data = t.bytes.data();
  const auto bad = [bf16_storage](float f) {  // (bf16: exponent bits all set)
    return !std::isfinite(f) || (bf16_storage && (bf16_bits::from_f32(f) & 0x7f80) == 0x7f80);
  };
  const auto scan = [&](int64_t b, int64_t e) -> int64_t {
    if (t.dtype == "F32") {
      for (int64_t i = b; i < e; ++i) {
        float f;
        std::memcpy(&f, data + i * 4, 4);
        if (bad(f)) return i;
      }
    } else if (t.dtype == "F64") {
      for (int64_t i = b; i < e; ++i) {
        double d;
        std::memcpy(&d, data + i * 8, 8);
        if (!(std::fabs(d) <= double(std::numeric_limits<float>::max()))) return i;  // (nan fails the <=)
        if (bad(float(d))) return i;
      }
    } else {  // BF16: exponent bits all set
      for (int64_t i = b; i < e; ++i) {
        uint16_t h;
        std::memcpy(&h, data + i * 2, 2);
        if ((h & 0x7f80) == 0x7f80) return i;
      }
    }
    return -1;
  };
  std::atomic<int64_t> first{-1};
  parallel_for(n, [&](int64_t b, int64_t e) {
    const int64_t at = scan(b, e);
    for (int64_t seen = first.load(); at >= 0 && (seen < 0 || at < seen);)
      if (first.compare_exchange_weak(seen, at)) break;
  });
  return first.load();
}

}  // namespace

void Model::load(std::map<std::string, HostTensor> tensors, const std::string& source, const std::string& key) {
  check_weight_tensors(layout_, tensors, source, key);
  for (const ParamInfo& p : layout_.params()) {  // a NaN or inf would end the run at its first loss
    const HostTensor& t = tensors.at(p.name);
    const bool bf16_storage = param_dtype_ == DType::bf16;
    const int64_t at = first_non_finite(t, p.numel, bf16_storage);
    const char* what = t.dtype == "BF16" ? "inf or nan"
                       : bf16_storage    ? "beyond bf16's range (bf16_pure's parameter dtype) or inf or nan"
                       : t.dtype == "F64" ? "inf or nan in fp32 (or beyond its range)"
                                          : "inf or nan";
    CONFIG_CHECK(at < 0, "{}: '{}': tensor '{}' element {} is {}: the weights must be finite", key, source, p.name,
                 at, what);
  }
  init_seed_.reset();
  init_tensors_ = std::make_shared<const std::map<std::string, HostTensor>>(std::move(tensors));
  if (!params_) return;  // a sharded strategy copies its shard in setup(), then release_weight_source()
  for (const ParamInfo& p : layout_.params()) upload(p, initial_values(p));
  release_weight_source();
  sync_work_copy();
}

void Model::release_weight_source() { init_tensors_.reset(); }

void Model::upload(const ParamInfo& p, const std::vector<float>& host) {
  if (param_dtype_ == DType::f32) {
    be_.copy_from_host(static_cast<float*>(params_.data()) + p.offset, host.data(), host.size() * 4);
    return;
  }
  std::vector<uint16_t> h(host.size());  // bf16_pure: rounded once, to nearest even
  for (size_t i = 0; i < h.size(); ++i) h[i] = bf16_bits::from_f32(host[i]);
  be_.copy_from_host(static_cast<uint16_t*>(params_.data()) + p.offset, h.data(), h.size() * 2);
}

void Model::sync_work_copy() {
  if (work_) be_.cast(params_work(), params());
}

UnitView Model::full_view(int unit, UnitPass pass) {
  const int64_t b = layout_.unit_begin(unit), n = layout_.unit_end(unit) - b;
  UnitView v;
  v.weights = params_work().slice(b, {n});
  if (writes_grads(pass)) {
    if (grads_) v.grads = grads().slice(b, {n});  // else the strategy supplies them (ParamStorage::full_grads)
    v.accumulate = unit_written_[size_t(unit)];
  }
  return v;
}

void Model::full_release(int unit, UnitPass pass) {
  if (writes_grads(pass)) unit_written_[size_t(unit)] = true;
}

void Model::zero_grads() { unit_written_.assign(size_t(layout_.num_units()), false); }

UnitView Model::acquire(int unit, UnitPass pass) {  // (unit_schedule tells the residency which uses read no weights)
  return residency_ ? residency_->acquire(unit, pass) : full_view(unit, pass);
}

void Model::release(int unit, UnitPass pass) {
  if (residency_) {
    residency_->release(unit, pass);
    return;
  }
  full_release(unit, pass);
  if (writes_grads(pass)) {
    if (on_unit_ready_) on_unit_ready_(unit);
    else if (pass == UnitPass::forward_backward) head_ready_pending_ = true;  // reported when backward() starts
  }
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

// ---- one block ---------------------------------------------------------------------------------------------------

void Model::layer_forward(const UnitView& v, int l, BlockActs& a, Tensor x_out, const AttnShape& s) {
  const LayerRefs& r = layer_refs_[size_t(l)];
  const int64_t D = dims_.d_model, F = dims_.d_ff;
  const Tensor ln1 = w(*r.ln1, v, {D}), wqkv = w(*r.wqkv, v, {3 * D, D}), wo = w(*r.wo, v, {D, D}),
               ln2 = w(*r.ln2, v, {D}), w13 = w(*r.w13, v, {2 * F, D}), w2 = w(*r.w2, v, {D, F});
  be_.rmsnorm_fwd(a.h1, a.rstd1, a.x_in, ln1, kNormEps);
  be_.matmul(a.qkv, a.h1, false, wqkv, true, 1.f, 0.f);  // [N, 3D] = h1 Wqkvᵀ
  be_.rope(a.qkv, s, float(dims_.rope_theta), false);
  if (!a.attention_done) be_.attention_fwd(attn_, s, a.attn_out, a.lse, a.probs, a.qkv);
  be_.matmul_add(a.x_mid, a.attn_out, false, wo, true, a.x_in);  // x_mid = x_in + attn Woᵀ
  be_.rmsnorm_fwd(a.h2, a.rstd2, a.x_mid, ln2, kNormEps);
  be_.matmul(a.ab, a.h2, false, w13, true, 1.f, 0.f);  // [N, 2F] = h2 [W1; W3]ᵀ
  be_.swiglu_fwd(a.g, a.ab);
  if (x_out.data) be_.matmul_add(x_out, a.g, false, w2, true, a.x_mid);  // x_out = x_mid + g W2ᵀ
}

void Model::layer_backward(const UnitView& v, int l, Tensor dx, BlockActs& a, const AttnShape& s) {
  const LayerRefs& r = layer_refs_[size_t(l)];
  const int64_t N = dx.rows(), D = dims_.d_model, F = dims_.d_ff;
  const ParamInfo &ln1 = *r.ln1, &wqkv = *r.wqkv, &wo = *r.wo, &ln2 = *r.ln2, &w13 = *r.w13, &w2 = *r.w2;
  const Tensor dh = scratch_->dh.slice(0, {N, D}), dg = scratch_->dg.slice(0, {N, F});
  const Tensor dab = scratch_->dbig.slice(0, {N, 2 * F}), dqkv = scratch_->dbig.slice(0, {N, 3 * D});
  const bool acc = v.accumulate;  // gradients of an earlier microbatch are there: add (beta 1), else write (beta 0)
  const float gb = acc ? 1.f : 0.f;
  const bool kept = a.elementwise_kept;  // h1, h2, g in the store; else recomputed into the dg scratch
  // Each weight's dX product runs before its dW product: a fused update (optimizer.in_gemm, weight_grad) rewrites
  // the weight. Recomputed h2 / h1 go to the dg scratch (free once dW2 has read g), as dh then receives dh2 / dh1.
  TRAINER_CHECK(scratch_->dg.numel() >= N * D, "Model: the dg scratch holds {} elements, h needs {}",
                scratch_->dg.numel(), N * D);
  const Tensor h_again = scratch_->dg.slice(0, {N, D});
  // FFN: x_out = x_mid + g W2ᵀ
  be_.matmul(dg, dx, false, w(w2, v, {D, F}), false, 1.f, 0.f);  // dg [N, F] = dx W2
  if (kept) be_.swiglu_bwd(dab, dg, a.ab);
  else be_.swiglu_bwd(dab, dg, a.ab, dg);                        // dab; dg := g = silu(a) * b
  weight_grad(v, w2, D, F, dx, kept ? a.g : dg, gb);             // dW2 (+)= dxᵀ g
  const Tensor h2 = kept ? a.h2 : h_again;
  if (!kept) be_.rmsnorm_fwd(h2, a.rstd2, a.x_mid, w(ln2, v, {D}), kNormEps);     // h2 again (same rstd2 values)
  be_.matmul(dh, dab, false, w(w13, v, {2 * F, D}), false, 1.f, 0.f);             // dh2 = dab [W1; W3]
  weight_grad(v, w13, 2 * F, D, dab, h2, gb);                                      // d[W1; W3] (+)= dabᵀ h2
  be_.rmsnorm_bwd(dx, g(ln2, v, {D}), dh, a.x_mid, w(ln2, v, {D}), a.rstd2, acc);  // dx := d x_mid
  // Attention: x_mid = x_in + attn_out Woᵀ
  const Tensor d_attn = dh;  // reuse [N, D]
  be_.matmul(d_attn, dx, false, w(wo, v, {D, D}), false, 1.f, 0.f);
  weight_grad(v, wo, D, D, dx, a.attn_out, gb);  // dWo (+)= dxᵀ attn_out
  be_.attention_bwd(attn_, s, dqkv, d_attn, a.qkv, a.attn_out, a.lse, a.probs);
  be_.rope(dqkv, s, float(dims_.rope_theta), true);  // d(pre-RoPE) = Rᵀ d(post-RoPE)
  const Tensor h1 = kept ? a.h1 : h_again;
  if (!kept) be_.rmsnorm_fwd(h1, a.rstd1, a.x_in, w(ln1, v, {D}), kNormEps);     // h1 again
  be_.matmul(dh, dqkv, false, w(wqkv, v, {3 * D, D}), false, 1.f, 0.f);          // dh1 = dqkv Wqkv
  weight_grad(v, wqkv, 3 * D, D, dqkv, h1, gb);                                   // dWqkv (+)= dqkvᵀ h1
  be_.rmsnorm_bwd(dx, g(ln1, v, {D}), dh, a.x_in, w(ln1, v, {D}), a.rstd1, acc);  // dx := d x_in
}

// ---- the step's control flow -------------------------------------------------------------------------------------
// One description of the order of work serves three purposes: running it, listing its unit uses for the residency's
// prefetch (unit_schedule: the same functions with recording_ set), and the planner's dry run (plan/: running it on
// the meta backend). The residual stream x(l) and each block's store are allocated when produced and freed when their
// last reader is done, so the memory in use follows the policy and the timeline shows it.

void Model::block_forward(int l, UnitPass pass, Store store, bool need_output) {
  if (need_output) alloc_x(l + 1);
  if (recording_) {
    recording_->push_back({l + 1, pass, true});
    return;
  }
  ScopedRange range(be_, pass == UnitPass::recompute ? "recompute" : "block", "block", l);
  const AttnShape s{rows_, T_, dims_.num_heads, dims_.d_head(), true, float(1.0 / std::sqrt(dims_.d_head()))};
  // a forward with no backward after it keeps nothing for one: policy none's elementwise tensors go to temporaries
  const bool elementwise = policy_.keep_elementwise() && store != Store::inference;
  const std::vector<SavedTensorSpec> tab = table(rows_, T_);
  Buffer st = be_.alloc(store_bytes(tab, false, elementwise), Category::activations);
  BlockActs a = carve(static_cast<char*>(st.data()), x(l), rows_, T_, elementwise);
  // checkpointing.keep_attention: a checkpointed block's forward keeps attention's outputs (the table's
  // attention_output tensors: O, logsumexp; naive: the probabilities too) aside; its recompute copies them back into
  // the store instead of running the attention forward again.
  auto each_part = [&](auto&& f) {
    size_t off = 0;
    for (const SavedTensorSpec& spec : tab) {
      if (spec.kind == SavedKind::input || !policy_.recomputed_keeps(spec)) continue;
      const Tensor& t = a.field(spec.name);
      f(t, off);
      off += size_t(align_up(int64_t(t.bytes()), 256));
    }
    return off;
  };
  Buffer& kept = attn_kept_[size_t(l)];
  if (kept) {
    each_part([&](const Tensor& t, size_t off) { be_.copy(t.data, static_cast<char*>(kept.data()) + off, t.bytes()); });
    a.attention_done = true;
  }
  const UnitView v = acquire(l + 1, pass);
  layer_forward(v, l, a, need_output ? x(l + 1) : Tensor(), s);
  release(l + 1, pass);
  if (store == Store::discard && pass == UnitPass::forward && policy_.keep_attention) {
    kept = be_.alloc(each_part([](const Tensor&, size_t) {}), Category::activations);
    each_part([&](const Tensor& t, size_t off) { be_.copy(static_cast<char*>(kept.data()) + off, t.data, t.bytes()); });
  }
  if (store == Store::keep) store_[size_t(l)] = std::move(st);  // else freed here: the next block reuses it
}

void Model::block_backward(int l) {
  if (recording_) {
    recording_->push_back({l + 1, UnitPass::backward, true});
  } else {
    ScopedRange range(be_, "block", "block", l);
    TRAINER_CHECK(store_[size_t(l)] && x_[size_t(l)], "Model: backward of block {} without its activations", l);
    const AttnShape s{rows_, T_, dims_.num_heads, dims_.d_head(), true, float(1.0 / std::sqrt(dims_.d_head()))};
    BlockActs a = carve(static_cast<char*>(store_[size_t(l)].data()), x(l), rows_, T_, policy_.keep_elementwise());
    const UnitView v = acquire(l + 1, UnitPass::backward);
    layer_backward(v, l, scratch_->dx.slice(0, {int64_t(rows_) * T_, dims_.d_model}), a, s);
    release(l + 1, UnitPass::backward);
    store_[size_t(l)].reset();
    attn_kept_[size_t(l)].reset();
  }
  free_x(l);
}

// Backward of blocks [a, b) whose input x(a) is alive; frees x(a). Recursive halving (Chen et al. 2016, Sec. 4.2).
void Model::nested_backward(int a, int b) {
  if (b - a == 1) {
    block_forward(a, UnitPass::recompute, Store::keep, /*need_output=*/false);
    block_backward(a);
    return;
  }
  const int m = (a + b) / 2;
  if (!x_alive_[size_t(m)]) {
    for (int l = a; l < m; ++l) {
      block_forward(l, UnitPass::recompute, Store::discard, true);
      if (l > a) free_x(l);
    }
  }
  nested_backward(m, b);
  nested_backward(a, m);
}

void Model::head(bool backward_next) {
  const int L = dims_.num_layers;
  const UnitPass pass = backward_next ? UnitPass::forward_backward : UnitPass::forward;
  if (recording_) {
    recording_->push_back({L + 1, pass, true});
    if (backward_next) free_x(L);
    return;
  }
  // Fused, chunked LM head + cross-entropy: per chunk of C tokens, hf = ln_final(x), logits = hf Wᵀ, the losses and
  // (backward_next) dlogits in place, dhf = dlogits W, dW (+)= dlogitsᵀ hf and ln_final's backward into dx. The
  // [N, V] logits never exist at once (Wijmans et al. 2024, "Cut Your Losses in Large-Vocabulary Language Models",
  // and Liger Kernel's fused linear cross-entropy do the same).
  ScopedRange range(be_, "lm_head", "block");
  const int64_t N = int64_t(rows_) * T_, D = dims_.d_model, V = dims_.vocab_size;
  const int64_t C = lm_head_chunk_rows(N, V, D, act_dtype_, policy_.lm_head_chunk_tokens);
  const DType a = act_dtype_;
  Carver measure{nullptr, be_.device()};
  measure.take(a, {C, D});
  measure.take(DType::f32, {C});
  measure.take(a, {C, V});
  if (backward_next) measure.take(a, {C, D});
  Buffer buf = be_.alloc(measure.off, Category::head);
  Carver c{static_cast<char*>(buf.data()), be_.device()};
  const Tensor hf_all = c.take(a, {C, D}), rstd_all = c.take(DType::f32, {C}), logits_all = c.take(a, {C, V});
  const Tensor dhf_all = backward_next ? c.take(a, {C, D}) : Tensor();
  const Tensor dx = scratch_->dx.slice(0, {N, D}), xf = x(L);
  const Tensor losses = losses_.view(DType::f32, {loss_used_});
  const UnitView v = acquire(L + 1, pass);
  const Tensor lnf = w(*ln_final_, v, {D}), wlm = w(*lm_head_, v, {V, D});
  // bf16 gradients (bf16_pure) over several chunks: the chunks' dW sum in an fp32 accumulator, added to the unit's
  // gradient once (one rounding, as the reference's single GEMM).
  const bool f32_acc = backward_next && v.grads.dtype != DType::f32 && N > C;
  Buffer acc_buf;
  UnitView gv = v;
  if (f32_acc) {
    acc_buf = be_.alloc(size_t(v.grads.numel()) * 4, Category::gradients);
    gv.grads = acc_buf.view(DType::f32, {v.grads.numel()});
    gv.accumulate = false;
  }
  if (backward_next) be_.fill(dx, 0.f);  // rmsnorm_bwd adds into dx
  for (int64_t i0 = 0; i0 < N; i0 += C) {
    const int64_t n = std::min(C, N - i0);
    const bool first = !gv.accumulate && i0 == 0;  // write the head's gradients, else add
    const Tensor xs = xf.slice(i0 * D, {n, D}), hf = hf_all.slice(0, {n, D}), rstd = rstd_all.slice(0, {n}),
                 logits = logits_all.slice(0, {n, V});
    be_.rmsnorm_fwd(hf, rstd, xs, lnf, kNormEps);
    be_.matmul(logits, hf, false, wlm, true, 1.f, 0.f);
    be_.cross_entropy(losses.slice(loss_offset_ + i0, {n}), backward_next ? logits : Tensor(), logits,
                      cur_targets_.slice(i0, {n}), dscale_);
    if (!backward_next) continue;
    const Tensor dhf = dhf_all.slice(0, {n, D});
    be_.matmul(dhf, logits, false, wlm, false, 1.f, 0.f);  // dhf = dlogits Wlm (before a fused update rewrites Wlm)
    if (i0 + n == N && !f32_acc)  // the last chunk: the head's matrix may be updated in this product (in_gemm)
      weight_grad(gv, *lm_head_, V, D, logits, hf, first ? 0.f : 1.f);
    else
      be_.matmul(g(*lm_head_, gv, {V, D}), logits, true, hf, false, 1.f, first ? 0.f : 1.f);  // dWlm (+)= dlogitsᵀ hf
    be_.rmsnorm_bwd(dx.slice(i0 * D, {n, D}), g(*ln_final_, gv, {D}), dhf, xs, lnf, rstd, /*accumulate_dw=*/!first);
  }
  if (f32_acc) {  // the padding between the unit's parameters stays as it was (written by no one)
    for (const ParamInfo* p : {ln_final_, lm_head_}) {
      const Tensor src = g(*p, gv, {p->numel}), dst = g(*p, v, {p->numel});
      if (v.accumulate) be_.add_inplace(dst, src);
      else be_.cast(dst, src);
    }
    acc_buf.reset();
  }
  release(L + 1, pass);
  if (backward_next) free_x(L);
}

void Model::run_forward(bool backward_next) {
  const int64_t V = dims_.vocab_size, D = dims_.d_model;
  alloc_x(0);
  if (recording_) {
    recording_->push_back({0, UnitPass::forward, true});
  } else {
    const UnitView v = acquire(0, UnitPass::forward);
    be_.embedding_fwd(x(0), cur_inputs_, w(*emb_, v, {V, D}));
    release(0, UnitPass::forward);
  }
  if (!backward_next) {  // no backward follows: a block's store and its input go as soon as its output exists
    for (int l = 0; l < dims_.num_layers; ++l) {
      block_forward(l, UnitPass::forward, Store::inference, true);
      free_x(l);
    }
    head(false);
    return;
  }
  for (const Segment& seg : segments_) {
    if (seg.kind == Segment::Kind::stored) {
      block_forward(seg.begin, UnitPass::forward, Store::keep, true);
      continue;
    }
    // A checkpointed segment keeps its input; nested also the midpoints its backward halves to first.
    std::vector<bool> keep(size_t(seg.end - seg.begin) + 1, false);
    keep[0] = true;
    if (seg.kind == Segment::Kind::nested)
      for (int a = seg.begin, b = seg.end; b - a > 1; a = (a + b) / 2) keep[size_t((a + b) / 2 - seg.begin)] = true;
    for (int l = seg.begin; l < seg.end; ++l) {
      block_forward(l, UnitPass::forward, Store::discard, true);
      if (!keep[size_t(l - seg.begin)]) free_x(l);
    }
  }
  head(backward_next);
}

void Model::run_backward() {
  for (auto it = segments_.rbegin(); it != segments_.rend(); ++it) {
    const Segment& seg = *it;
    switch (seg.kind) {
      case Segment::Kind::stored: block_backward(seg.begin); break;
      case Segment::Kind::flat:
        for (int l = seg.begin; l < seg.end; ++l)
          block_forward(l, UnitPass::recompute, Store::keep, /*need_output=*/l + 1 < seg.end);
        for (int l = seg.end - 1; l >= seg.begin; --l) block_backward(l);
        break;
      case Segment::Kind::nested: nested_backward(seg.begin, seg.end); break;
    }
  }
  if (recording_) {
    recording_->push_back({0, UnitPass::backward, false});  // the embedding's backward reads no weights
    return;
  }
  const int64_t V = dims_.vocab_size, D = dims_.d_model, N = int64_t(rows_) * T_;
  const UnitView v = acquire(0, UnitPass::backward);
  const Tensor gemb = g(*emb_, v, {V, D});
  if (!v.accumulate) be_.fill(gemb, 0.f);  // its rows receive scattered adds
  be_.embedding_bwd(gemb, cur_inputs_, scratch_->dx.slice(0, {N, D}));
  release(0, UnitPass::backward);
}

std::vector<UnitUse> Model::unit_schedule(bool backward_next) {
  auto& cached = schedule_[backward_next ? 1 : 0];
  if (!cached.empty()) return cached;
  std::vector<UnitUse> uses;
  const std::vector<bool> alive = x_alive_;
  x_alive_.assign(x_alive_.size(), false);
  recording_ = &uses;
  run_forward(backward_next);
  if (backward_next) run_backward();
  recording_ = nullptr;
  x_alive_ = alive;
  cached = uses;
  return uses;
}

// ---- forward and backward ----------------------------------------------------------------------------------------

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
  free_activations();  // a forward without its backward leaves nothing behind
  const int64_t N = int64_t(rows) * seq_len;
  TRAINER_CHECK(offset >= 0 && offset + N <= loss_used_, "tokens {}+{} outside the step's {} tokens", offset, N,
                loss_used_);
  rows_ = rows;
  T_ = seq_len;
  loss_offset_ = offset;
  dscale_ = dscale;
  const Tensor step_tokens(tokens_.data(), DType::i32, be_.device(), {2 * loss_capacity_});
  cur_inputs_ = step_tokens.slice(offset, {N});
  cur_targets_ = step_tokens.slice(loss_capacity_ + offset, {N});
  if (residency_) residency_->begin_schedule(unit_schedule(backward_next));
  run_forward(backward_next);
  if (backward_next) backward_ready_ = true;
  else free_activations();
}

void Model::backward(const std::function<void(int)>& on_unit_ready) {
  TRAINER_CHECK(backward_ready_, "Model::backward: no forward with backward_next = true to go back through");
  on_unit_ready_ = on_unit_ready;
  if (on_unit_ready_ && head_ready_pending_) on_unit_ready_(dims_.num_layers + 1);  // the fused head's, from forward
  head_ready_pending_ = false;
  run_backward();
  on_unit_ready_ = nullptr;
  backward_ready_ = false;
}

}  // namespace trainer
