// CpuBackend: checks shapes and dtypes, then calls the float instantiation of the cpu_ops.h templates.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "backend/bf16.h"
#include "backend/cpu/cpu_ops.h"

namespace trainer {
namespace {

/// The f32 data of t, after checking that it is a CPU f32 tensor. `what` names the argument in the message.
float* f32(const Tensor& t, const char* what) {
  TRAINER_CHECK(t.dtype == DType::f32, "cpu backend: {} has dtype {}, expected f32 (bf16 activations are CUDA-only)",
                what, dtype_name(t.dtype));
  TRAINER_CHECK(t.device == Device::cpu, "cpu backend: {} is not a host tensor", what);
  return t.ptr<float>();
}

/// Checks that t is a CPU tensor of dtype f32 or bf16 (bf16 storage: parameters, gradients, moments).
void check_float(const Tensor& t, const char* what) {
  TRAINER_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, "cpu backend: {} has dtype {}, expected f32 or bf16",
                what, dtype_name(t.dtype));
  TRAINER_CHECK(t.device == Device::cpu, "cpu backend: {} is not a host tensor", what);
}

/// The bf16 bits of t, after checking that it is a CPU bf16 tensor.
uint16_t* bf16(const Tensor& t, const char* what) {
  TRAINER_CHECK(t.dtype == DType::bf16, "cpu backend: {} has dtype {}, expected bf16", what, dtype_name(t.dtype));
  TRAINER_CHECK(t.device == Device::cpu, "cpu backend: {} is not a host tensor", what);
  return t.ptr<uint16_t>();
}

/// t's values as fp32: its own data when f32, else (bf16) converted into `tmp` (exact). Checks the dtype.
const float* as_f32(const Tensor& t, std::vector<float>& tmp, const char* what) {
  check_float(t, what);
  if (t.dtype == DType::f32) return t.ptr<float>();
  const uint16_t* b = t.ptr<uint16_t>();
  tmp.resize(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) tmp[size_t(i)] = bf16_bits::to_f32(b[i]);
  return tmp.data();
}

/// dst[i] = bf16(src[i]), round to nearest even, i < n.
void round_into(uint16_t* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits::from_f32(src[i]);
}

/// Element i of a CPU f32 or bf16 tensor as fp32.
inline float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::bf16 ? bf16_bits::to_f32(t.ptr<uint16_t>()[i]) : t.ptr<float>()[i];
}

const int32_t* i32(const Tensor& t, const char* what) {
  TRAINER_CHECK(t.dtype == DType::i32, "cpu backend: {} has dtype {}, expected i32", what, dtype_name(t.dtype));
  TRAINER_CHECK(t.device == Device::cpu, "cpu backend: {} is not a host tensor", what);
  return t.ptr<int32_t>();
}

void check_numel(const Tensor& t, int64_t n, const char* what) {
  TRAINER_CHECK(t.numel() == n, "cpu backend: {} {} has {} elements, expected {}", what, t.shape_str(), t.numel(), n);
}

struct CpuEvent final : Event {
  std::chrono::steady_clock::time_point t{};
};

CpuEvent& as_cpu_event(Event& e) {
  auto* c = dynamic_cast<CpuEvent*>(&e);
  TRAINER_CHECK(c != nullptr, "cpu backend: event was not made by CpuBackend::make_event");
  return *c;
}

/// Checks qkv [B*T, 3D] and out-like [B*T, D] sizes against the attention shape.
void check_attn(const AttnShape& s, const Tensor& qkv, const Tensor& out_like, const char* out_name) {
  TRAINER_CHECK(s.B > 0 && s.T > 0 && s.H > 0 && s.d_head > 0, "attention: shape B={} T={} H={} d_head={}", s.B,
                s.T, s.H, s.d_head);
  const int64_t N = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
  check_numel(qkv, N * 3 * D, "qkv");
  check_numel(out_like, N * D, out_name);
}

}  // namespace

std::string CpuBackend::description() const {
  // openblas_get_config(): "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."; keep the name and the version.
  std::istringstream cfg(openblas_get_config());
  std::string lib, version;
  cfg >> lib >> version;
  return fmt::format("CPU ({} {}, {} threads)", lib, version, openblas_get_num_threads());
}

// ---- memory ----------------------------------------------------------------------------------------------------

void* CpuBackend::raw_alloc(size_t bytes) {
  constexpr size_t kAlign = 64;  // a cache line; also what AVX-512 loads like
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;  // aligned_alloc wants a multiple of the alignment
  return std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
}

void CpuBackend::raw_free(void* p) { std::free(p); }

void CpuBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
}

void CpuBackend::fill(Tensor t, float value) {
  ScopedRange r(*this, "fill");
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::f32: std::fill_n(t.ptr<float>(), n, value); break;
    case DType::f64: std::fill_n(t.ptr<double>(), n, double(value)); break;
    case DType::i32: std::fill_n(t.ptr<int32_t>(), n, int32_t(value)); break;
    case DType::bf16: std::fill_n(t.ptr<uint16_t>(), n, bf16_bits::from_f32(value)); break;
  }
}

// ---- timing ----------------------------------------------------------------------------------------------------

std::unique_ptr<Event> CpuBackend::make_event() { return std::make_unique<CpuEvent>(); }

void CpuBackend::record(Event& e) { as_cpu_event(e).t = std::chrono::steady_clock::now(); }

float CpuBackend::elapsed_ms(Event& start, Event& end) {
  return std::chrono::duration<float, std::milli>(as_cpu_event(end).t - as_cpu_event(start).t).count();
}

// ---- ops -------------------------------------------------------------------------------------------------------

void CpuBackend::matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
                        float beta) {
  ScopedRange r(*this, "matmul");
  // Row-major A stored [rows, cols]: op(A) is [M, K] with M = rows (or cols when transposed); lda = cols always.
  const int64_t M = trans_a ? A.cols() : A.rows(), K = trans_a ? A.rows() : A.cols();
  const int64_t Kb = trans_b ? B.cols() : B.rows(), N = trans_b ? B.rows() : B.cols();
  TRAINER_CHECK(K == Kb, "matmul: inner dims differ: op(A) {}x{} (A {}{}), op(B) {}x{} (B {}{})", M, K, A.shape_str(),
                trans_a ? "ᵀ" : "", Kb, N, B.shape_str(), trans_b ? "ᵀ" : "");
  TRAINER_CHECK(C.rows() == M && C.cols() == N, "matmul: C {} is not {}x{}", C.shape_str(), M, N);
  std::vector<float> ta, tb, tc;  // fp32 copies of bf16 operands
  const float* a = as_f32(A, ta, "matmul A");
  const float* b = as_f32(B, tb, "matmul B");
  check_float(C, "matmul C");
  if (C.dtype == DType::f32) {
    cpu::gemm<float>(trans_a, trans_b, M, N, K, alpha, a, A.cols(), b, B.cols(), beta, C.ptr<float>(), C.cols());
    return;
  }
  // bf16 C: alpha AB + beta C in fp32 (C read exactly), then one rounding per element.
  if (beta != 0.f)
    as_f32(C, tc, "matmul C");
  else
    tc.assign(size_t(C.numel()), 0.f);
  cpu::gemm<float>(trans_a, trans_b, M, N, K, alpha, a, A.cols(), b, B.cols(), beta, tc.data(), C.cols());
  round_into(C.ptr<uint16_t>(), tc.data(), C.numel());
}

void CpuBackend::embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  ScopedRange r(*this, "embedding_fwd");
  const int64_t N = tokens.numel(), V = table.rows(), D = table.cols();
  check_numel(out, N * D, "embedding out");
  float* o = f32(out, "out");
  const int32_t* tok = i32(tokens, "tokens");
  check_float(table, "table");
  if (table.dtype == DType::f32) {
    cpu::embedding_fwd<float>(o, tok, table.ptr<float>(), N, D, V);
    return;
  }
  const uint16_t* tb = table.ptr<uint16_t>();
  for (int64_t n = 0; n < N; ++n) {
    TRAINER_CHECK(tok[n] >= 0 && tok[n] < V, "embedding_fwd: token {} at row {} outside the vocabulary [0, {})",
                  tok[n], n, V);
    const uint16_t* row = tb + int64_t(tok[n]) * D;
    for (int64_t d = 0; d < D; ++d) o[n * D + d] = bf16_bits::to_f32(row[d]);
  }
}

void CpuBackend::embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) {
  ScopedRange r(*this, "embedding_bwd");
  const int64_t N = tokens.numel(), V = dtable.rows(), D = dtable.cols();
  check_numel(dout, N * D, "embedding dout");
  const int32_t* tok = i32(tokens, "tokens");
  const float* dO = f32(dout, "dout");
  check_float(dtable, "dtable");
  if (dtable.dtype == DType::f32) {
    cpu::embedding_bwd<float>(dtable.ptr<float>(), tok, dO, N, D, V);
    return;
  }
  // bf16: each touched row's sum in fp32 (rows of one token in increasing n), then one rounding into dtable.
  std::vector<int64_t> slot(size_t(V), -1);  // token -> row of acc
  std::vector<int32_t> touched;
  for (int64_t n = 0; n < N; ++n) {
    TRAINER_CHECK(tok[n] >= 0 && tok[n] < V, "embedding_bwd: token {} at row {} outside the vocabulary [0, {})",
                  tok[n], n, V);
    if (slot[size_t(tok[n])] < 0) {
      slot[size_t(tok[n])] = int64_t(touched.size());
      touched.push_back(tok[n]);
    }
  }
  std::vector<float> acc(touched.size() * size_t(D), 0.f);
  for (int64_t n = 0; n < N; ++n) {
    float* a = acc.data() + slot[size_t(tok[n])] * D;
    for (int64_t d = 0; d < D; ++d) a[d] += dO[n * D + d];
  }
  uint16_t* dt = dtable.ptr<uint16_t>();
  for (size_t r = 0; r < touched.size(); ++r) {
    uint16_t* row = dt + int64_t(touched[r]) * D;
    const float* a = acc.data() + int64_t(r) * D;
    for (int64_t d = 0; d < D; ++d) row[d] = bf16_bits::from_f32(bf16_bits::to_f32(row[d]) + a[d]);
  }
}

void CpuBackend::rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  ScopedRange r(*this, "rmsnorm_fwd");
  const int64_t N = x.rows(), D = x.cols();
  check_numel(y, N * D, "rmsnorm y");
  check_numel(w, D, "rmsnorm w");
  check_numel(rstd, N, "rmsnorm rstd");
  std::vector<float> tw;
  const float* wf = as_f32(w, tw, "w");
  cpu::rmsnorm_fwd<float>(f32(y, "y"), f32(rstd, "rstd"), f32(x, "x"), wf, N, D, eps);
}

void CpuBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, bool accumulate_dw) {
  ScopedRange r(*this, "rmsnorm_bwd");
  const int64_t N = x.rows(), D = x.cols();
  check_numel(dx, N * D, "rmsnorm dx");
  check_numel(dy, N * D, "rmsnorm dy");
  check_numel(w, D, "rmsnorm w");
  check_numel(dw, D, "rmsnorm dw");
  check_numel(rstd, N, "rmsnorm rstd");
  std::vector<float> tw;
  const float* wf = as_f32(w, tw, "w");
  check_float(dw, "dw");
  if (dw.dtype == DType::f32) {
    if (!accumulate_dw) std::fill_n(dw.ptr<float>(), D, 0.f);
    cpu::rmsnorm_bwd<float>(f32(dx, "dx"), dw.ptr<float>(), f32(dy, "dy"), f32(x, "x"), wf, f32(rstd, "rstd"), N, D);
    return;
  }
  // bf16 dw: the column sum in an fp32 row from zero, then dw = bf16(dw + sum) (or bf16(sum)): one rounding.
  std::vector<float> sum(size_t(D), 0.f);
  cpu::rmsnorm_bwd<float>(f32(dx, "dx"), sum.data(), f32(dy, "dy"), f32(x, "x"), wf, f32(rstd, "rstd"), N, D);
  uint16_t* d = dw.ptr<uint16_t>();
  for (int64_t k = 0; k < D; ++k)
    d[k] = bf16_bits::from_f32(accumulate_dw ? bf16_bits::to_f32(d[k]) + sum[size_t(k)] : sum[size_t(k)]);
}

void CpuBackend::rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) {
  ScopedRange r(*this, "rope");
  check_numel(qkv, int64_t(s.B) * s.T * 3 * s.H * s.d_head, "rope qkv");
  cpu::rope<float>(f32(qkv, "qkv"), s, theta, inverse);
}

void CpuBackend::attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                               const Tensor& qkv) {
  ScopedRange range(*this, impl == AttnImpl::flash2 ? "attention_fwd flash2" : "attention_fwd naive", "attention");
  check_attn(s, qkv, out, "attention out");
  check_numel(lse, int64_t(s.B) * s.H * s.T, "attention lse");
  if (impl == AttnImpl::naive) {
    check_numel(probs, int64_t(s.B) * s.H * s.T * s.T, "attention probs");
    cpu::attention_naive_fwd<float>(s, f32(out, "out"), f32(lse, "lse"), f32(probs, "probs"), f32(qkv, "qkv"));
  } else {
    cpu::attention_flash2_fwd<float>(s, f32(out, "out"), f32(lse, "lse"), f32(qkv, "qkv"), kFlashTile, kFlashTile);
  }
}

void CpuBackend::attention_bwd(AttnImpl impl, const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                               const Tensor& out, const Tensor& lse, const Tensor& probs) {
  ScopedRange range(*this, impl == AttnImpl::flash2 ? "attention_bwd flash2" : "attention_bwd naive", "attention");
  check_attn(s, qkv, dout, "attention dout");
  check_numel(dqkv, qkv.numel(), "attention dqkv");
  if (impl == AttnImpl::naive) {
    check_numel(probs, int64_t(s.B) * s.H * s.T * s.T, "attention probs");
    cpu::attention_naive_bwd<float>(s, f32(dqkv, "dqkv"), f32(dout, "dout"), f32(qkv, "qkv"), f32(probs, "probs"));
  } else {
    check_numel(out, dout.numel(), "attention out");
    check_numel(lse, int64_t(s.B) * s.H * s.T, "attention lse");
    cpu::attention_flash2_bwd<float>(s, f32(dqkv, "dqkv"), f32(dout, "dout"), f32(qkv, "qkv"), f32(out, "out"),
                                     f32(lse, "lse"), kFlashTile, kFlashTile);
  }
}

void CpuBackend::swiglu_fwd(Tensor g, const Tensor& ab) {
  ScopedRange r(*this, "swiglu_fwd");
  TRAINER_CHECK(ab.cols() % 2 == 0, "swiglu: ab {} has an odd number of columns", ab.shape_str());
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  check_numel(g, N * F, "swiglu g");
  cpu::swiglu_fwd<float>(f32(g, "g"), f32(ab, "ab"), N, F);
}

void CpuBackend::swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g) {
  ScopedRange r(*this, "swiglu_bwd");
  TRAINER_CHECK(ab.cols() % 2 == 0, "swiglu: ab {} has an odd number of columns", ab.shape_str());
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  check_numel(dg, N * F, "swiglu dg");
  check_numel(dab, N * 2 * F, "swiglu dab");
  if (g.data) check_numel(g, N * F, "swiglu g");
  cpu::swiglu_bwd<float>(f32(dab, "dab"), f32(dg, "dg"), f32(ab, "ab"), N, F, g.data ? f32(g, "g") : nullptr);
}

void CpuBackend::add_inplace(Tensor x, const Tensor& y) {
  ScopedRange r(*this, "add_inplace");
  check_numel(y, x.numel(), "add_inplace y");
  check_float(x, "x");
  check_float(y, "y");
  const int64_t n = x.numel();
  if (x.dtype == DType::f32 && y.dtype == DType::f32) {
    cpu::add_inplace<float>(x.ptr<float>(), y.ptr<float>(), n);
  } else if (x.dtype == DType::f32) {
    float* xf = x.ptr<float>();
    for (int64_t i = 0; i < n; ++i) xf[i] += load(y, i);
  } else {
    uint16_t* xb = x.ptr<uint16_t>();
    for (int64_t i = 0; i < n; ++i) xb[i] = bf16_bits::from_f32(bf16_bits::to_f32(xb[i]) + load(y, i));
  }
}

void CpuBackend::cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets,
                               float dscale) {
  ScopedRange r(*this, "cross_entropy");
  const int64_t N = logits.rows(), V = logits.cols();
  check_numel(targets, N, "cross_entropy targets");
  check_numel(losses, N, "cross_entropy losses");
  float* dl = nullptr;
  if (dlogits.data) {
    check_numel(dlogits, N * V, "cross_entropy dlogits");
    dl = f32(dlogits, "dlogits");
  }
  cpu::cross_entropy<float>(f32(losses, "losses"), dl, f32(logits, "logits"), i32(targets, "targets"), N, V, dscale);
}

double CpuBackend::sum(const Tensor& x) {
  ScopedRange r(*this, "sum");
  check_float(x, "x");
  if (x.dtype == DType::f32) return cpu::sum<float>(x.ptr<float>(), x.numel());
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) s += double(load(x, i));
  return s;
}

double CpuBackend::sum_squares(const Tensor& x) {
  ScopedRange r(*this, "sum_squares");
  check_float(x, "x");
  if (x.dtype == DType::f32) return cpu::sum_squares<float>(x.ptr<float>(), x.numel());
  double s = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = double(load(x, i));
    s += v * v;
  }
  return s;
}

void CpuBackend::scale(Tensor x, float s) {
  ScopedRange r(*this, "scale");
  check_float(x, "x");
  if (x.dtype == DType::f32) return cpu::scale<float>(x.ptr<float>(), x.numel(), s);
  uint16_t* xb = x.ptr<uint16_t>();
  for (int64_t i = 0; i < x.numel(); ++i) xb[i] = bf16_bits::from_f32(bf16_bits::to_f32(xb[i]) * s);
}

void CpuBackend::cast(Tensor dst, const Tensor& src) {
  ScopedRange r(*this, "cast");
  check_numel(dst, src.numel(), "cast dst");
  if (dst.dtype == src.dtype) {
    copy(dst.data, src.data, src.bytes());
  } else if (dst.dtype == DType::bf16 && src.dtype == DType::f32) {
    round_into(dst.ptr<uint16_t>(), src.ptr<float>(), src.numel());
  } else if (dst.dtype == DType::f32 && src.dtype == DType::bf16) {
    float* d = dst.ptr<float>();
    for (int64_t i = 0; i < src.numel(); ++i) d[i] = load(src, i);
  } else {
    TRAINER_CHECK(false, "cpu backend: cast {} -> {} is not supported", dtype_name(src.dtype), dtype_name(dst.dtype));
  }
}

void CpuBackend::clip_factor_to(const Tensor& g, double max_norm, double* sumsq, float* factor) {
  ScopedRange r(*this, "clip_factor");
  *sumsq = sum_squares(g);
  *factor = float(std::min(1.0, max_norm / (std::sqrt(*sumsq) + 1e-6)));
}

double CpuBackend::adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& args) {
  ScopedRange r(*this, "adamw");
  AdamWArgs a = args;
  if (a.grad_scale_by) a.grad_scale *= *a.grad_scale_by;  // the factor clip_factor_to wrote (host memory here)
  TRAINER_CHECK(p_work.data == nullptr, "cpu backend: adamw with a working copy (p_work) is CUDA-only");
  const int64_t n = p.numel();
  check_numel(g, n, "adamw g");
  check_numel(m, n, "adamw m");
  check_numel(v, n, "adamw v");
  TRAINER_CHECK(a.t >= 1, "adamw: step t = {} (1-based)", a.t);
  const bool pure = p.dtype == DType::bf16;
  if (pure)
    TRAINER_CHECK(g.dtype == DType::bf16 && m.dtype == DType::bf16 && v.dtype == DType::bf16,
                  "adamw: bf16 p needs bf16 g, m and v (got {}, {}, {})", dtype_name(g.dtype), dtype_name(m.dtype),
                  dtype_name(v.dtype));
  TRAINER_CHECK(pure || !a.stochastic_rounding, "adamw: stochastic rounding needs bf16 p, g, m and v (p is {})",
                dtype_name(p.dtype));
  const double sumsq = a.grad_sumsq ? sum_squares(g) : 0.0;  // before the update: g may alias nothing it writes
  if (pure)
    cpu::adamw_bf16(bf16(p, "p"), bf16(g, "g"), bf16(m, "m"), bf16(v, "v"), n, a);
  else
    cpu::adamw<float>(f32(p, "p"), f32(g, "g"), f32(m, "m"), f32(v, "v"), n, a);
  if (a.grad_sumsq && a.sumsq_to) {
    *a.sumsq_to = sumsq;
    return 0.0;
  }
  return sumsq;
}

}  // namespace trainer
