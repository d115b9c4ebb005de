// CpuBackend: checks shapes and dtypes, then calls the float instantiation of the cpu_ops.h templates.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "backend/cpu/cpu_ops.h"

namespace trainer {
namespace {

/// The f32 data of t, after checking that it is a CPU f32 tensor. `what` names the argument in the message.
float* f32(const Tensor& t, const char* what) {
  TRAINER_CHECK(t.dtype == DType::f32, "cpu backend: {} has dtype {}, expected f32 (bf16 is CUDA-only)", what,
                dtype_name(t.dtype));
  TRAINER_CHECK(t.device == Device::cpu, "cpu backend: {} is not a host tensor", what);
  return t.ptr<float>();
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
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::f32: std::fill_n(t.ptr<float>(), n, value); break;
    case DType::f64: std::fill_n(t.ptr<double>(), n, double(value)); break;
    case DType::i32: std::fill_n(t.ptr<int32_t>(), n, int32_t(value)); break;
    default: TRAINER_CHECK(false, "cpu backend: fill of dtype {} is not supported (bf16 is CUDA-only)",
                           dtype_name(t.dtype));
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
  // Row-major A stored [rows, cols]: op(A) is [M, K] with M = rows (or cols when transposed); lda = cols always.
  const int64_t M = trans_a ? A.cols() : A.rows(), K = trans_a ? A.rows() : A.cols();
  const int64_t Kb = trans_b ? B.cols() : B.rows(), N = trans_b ? B.rows() : B.cols();
  TRAINER_CHECK(K == Kb, "matmul: inner dims differ: op(A) {}x{} (A {}{}), op(B) {}x{} (B {}{})", M, K, A.shape_str(),
                trans_a ? "ᵀ" : "", Kb, N, B.shape_str(), trans_b ? "ᵀ" : "");
  TRAINER_CHECK(C.rows() == M && C.cols() == N, "matmul: C {} is not {}x{}", C.shape_str(), M, N);
  cpu::gemm<float>(trans_a, trans_b, M, N, K, alpha, f32(A, "A"), A.cols(), f32(B, "B"), B.cols(), beta, f32(C, "C"),
                   C.cols());
}

void CpuBackend::embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  const int64_t N = tokens.numel(), V = table.rows(), D = table.cols();
  check_numel(out, N * D, "embedding out");
  cpu::embedding_fwd<float>(f32(out, "out"), i32(tokens, "tokens"), f32(table, "table"), N, D, V);
}

void CpuBackend::embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) {
  const int64_t N = tokens.numel(), V = dtable.rows(), D = dtable.cols();
  check_numel(dout, N * D, "embedding dout");
  cpu::embedding_bwd<float>(f32(dtable, "dtable"), i32(tokens, "tokens"), f32(dout, "dout"), N, D, V);
}

void CpuBackend::rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  const int64_t N = x.rows(), D = x.cols();
  check_numel(y, N * D, "rmsnorm y");
  check_numel(w, D, "rmsnorm w");
  check_numel(rstd, N, "rmsnorm rstd");
  cpu::rmsnorm_fwd<float>(f32(y, "y"), f32(rstd, "rstd"), f32(x, "x"), f32(w, "w"), N, D, eps);
}

void CpuBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, bool accumulate_dw) {
  const int64_t N = x.rows(), D = x.cols();
  check_numel(dx, N * D, "rmsnorm dx");
  check_numel(dy, N * D, "rmsnorm dy");
  check_numel(w, D, "rmsnorm w");
  check_numel(dw, D, "rmsnorm dw");
  check_numel(rstd, N, "rmsnorm rstd");
  if (!accumulate_dw) std::fill_n(f32(dw, "dw"), D, 0.f);
  cpu::rmsnorm_bwd<float>(f32(dx, "dx"), f32(dw, "dw"), f32(dy, "dy"), f32(x, "x"), f32(w, "w"), f32(rstd, "rstd"),
                          N, D);
}

void CpuBackend::rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) {
  check_numel(qkv, int64_t(s.B) * s.T * 3 * s.H * s.d_head, "rope qkv");
  cpu::rope<float>(f32(qkv, "qkv"), s, theta, inverse);
}

void CpuBackend::attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                               const Tensor& qkv) {
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
  TRAINER_CHECK(ab.cols() % 2 == 0, "swiglu: ab {} has an odd number of columns", ab.shape_str());
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  check_numel(g, N * F, "swiglu g");
  cpu::swiglu_fwd<float>(f32(g, "g"), f32(ab, "ab"), N, F);
}

void CpuBackend::swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g) {
  TRAINER_CHECK(ab.cols() % 2 == 0, "swiglu: ab {} has an odd number of columns", ab.shape_str());
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  check_numel(dg, N * F, "swiglu dg");
  check_numel(dab, N * 2 * F, "swiglu dab");
  if (g.data) check_numel(g, N * F, "swiglu g");
  cpu::swiglu_bwd<float>(f32(dab, "dab"), f32(dg, "dg"), f32(ab, "ab"), N, F, g.data ? f32(g, "g") : nullptr);
}

void CpuBackend::add_inplace(Tensor x, const Tensor& y) {
  check_numel(y, x.numel(), "add_inplace y");
  cpu::add_inplace<float>(f32(x, "x"), f32(y, "y"), x.numel());
}

void CpuBackend::cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets,
                               float dscale) {
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

double CpuBackend::sum(const Tensor& x) { return cpu::sum<float>(f32(x, "x"), x.numel()); }

double CpuBackend::sum_squares(const Tensor& x) { return cpu::sum_squares<float>(f32(x, "x"), x.numel()); }

void CpuBackend::scale(Tensor x, float s) { cpu::scale<float>(f32(x, "x"), x.numel(), s); }

void CpuBackend::cast(Tensor dst, const Tensor& src) {
  TRAINER_CHECK(dst.dtype != DType::bf16 && src.dtype != DType::bf16,
                "cpu backend: cast {} -> {}: bf16 is CUDA-only", dtype_name(src.dtype), dtype_name(dst.dtype));
  TRAINER_CHECK(dst.dtype == src.dtype, "cpu backend: cast {} -> {} is not supported", dtype_name(src.dtype),
                dtype_name(dst.dtype));
  check_numel(dst, src.numel(), "cast dst");
  copy(dst.data, src.data, src.bytes());
}

double CpuBackend::adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) {
  TRAINER_CHECK(p_work.data == nullptr, "cpu backend: adamw with a bf16 working copy (p_work) is CUDA-only");
  const int64_t n = p.numel();
  check_numel(g, n, "adamw g");
  check_numel(m, n, "adamw m");
  check_numel(v, n, "adamw v");
  TRAINER_CHECK(a.t >= 1, "adamw: step t = {} (1-based)", a.t);
  const double sumsq = a.grad_sumsq ? sum_squares(g) : 0.0;  // before the update: g may alias nothing it writes
  cpu::adamw<float>(f32(p, "p"), f32(g, "g"), f32(m, "m"), f32(v, "v"), n, a);
  return sumsq;
}

}  // namespace trainer
