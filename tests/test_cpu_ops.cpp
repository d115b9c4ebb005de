// CPU reference ops (src/backend/cpu/cpu_ops.h) and CpuBackend.
//
//  1. Each op in double (T = double): forward against a formula written out here in plain loops; backward against
//     central finite differences of a random linear functional of the outputs, L = sum_i R_i y_i.
//  2. CpuBackend (fp32) against the double templates on the same inputs, relative error ~1e-5.
//  3. AdamW: two steps against numbers computed by hand (numpy, float64) with exactly representable hyper-parameters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <regex>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_ops.h"
#include "test_helpers.h"

namespace {

using namespace trainer;
using trainer::testing::all_close;
using trainer::testing::random_vector;
using Vec = std::vector<double>;

Vec zeros(int64_t n) { return Vec(static_cast<size_t>(n), 0.0); }
/// n doubles uniform in [lo, hi), seeded.
Vec rnd(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  return random_vector<double>(static_cast<size_t>(n), seed, lo, hi);
}
double dot(const Vec& a, const Vec& b) { return std::inner_product(a.begin(), a.end(), b.begin(), 0.0); }

/// Checks grad = dL/dx against central differences (L(x + h e_i) - L(x - h e_i)) / 2h at up to `max_coords`
/// coordinates of x (all of them when x is small, else a seeded random sample). loss() reads x.
/// Returns all_close's report ("" when every checked coordinate agrees).
std::string check_fd(Vec& x, const Vec& grad, const std::function<double()>& loss, size_t max_coords = 250,
                     double h = 1e-5, double atol = 1e-8, double rtol = 1e-6) {
  std::vector<size_t> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (idx.size() > max_coords) {
    std::shuffle(idx.begin(), idx.end(), std::mt19937_64(12345));
    idx.resize(max_coords);
  }
  Vec fd, an;
  for (size_t i : idx) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    fd.push_back((lp - lm) / (2 * h));
    an.push_back(grad[i]);
  }
  return all_close(an, fd, atol, rtol);
}

/// max |got - ref| / max |ref|: the normwise relative error used for fp32 against fp64.
template <class A>
double rel_err(const std::vector<A>& got, const Vec& ref) {
  REQUIRE(got.size() == ref.size());
  double num = 0, den = 1e-300;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - ref[i]));
    den = std::max(den, std::fabs(ref[i]));
  }
  return num / den;
}

std::vector<float> to_f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }
Vec to_f64(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

Tensor t32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t(v.data(), DType::f32, Device::cpu, shape);
  REQUIRE(size_t(t.numel()) == v.size());
  return t;
}
Tensor ti32(std::vector<int32_t>& v) { return Tensor(v.data(), DType::i32, Device::cpu, {int64_t(v.size())}); }

std::vector<int32_t> random_ids(size_t n, int32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, V - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

/// Attention forward in plain loops (no BLAS, no tiling): out, lse from qkv [B*T, 3D].
void attention_loops(const AttnShape& s, const Vec& qkv, Vec& out, Vec& lse) {
  const int D = s.H * s.d_head;
  out.assign(size_t(s.B) * s.T * D, 0.0);
  lse.assign(size_t(s.B) * s.H * s.T, 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.T; ++i) {
        const int n_keys = s.causal ? i + 1 : s.T;
        Vec sc = zeros(n_keys);
        for (int j = 0; j < n_keys; ++j) {
          double acc = 0;
          for (int d = 0; d < s.d_head; ++d)
            acc += qkv[(b * s.T + i) * 3 * D + h * s.d_head + d] *
                   qkv[(b * s.T + j) * 3 * D + D + h * s.d_head + d];
          sc[j] = double(s.scale) * acc;
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double v : sc) z += std::exp(v - m);
        lse[(b * s.H + h) * s.T + i] = m + std::log(z);
        for (int j = 0; j < n_keys; ++j)
          for (int d = 0; d < s.d_head; ++d)
            out[(b * s.T + i) * D + h * s.d_head + d] +=
                std::exp(sc[j] - m) / z * qkv[(b * s.T + j) * 3 * D + 2 * D + h * s.d_head + d];
      }
}

}  // namespace

// =====================================================================================================================
// 1. templates in double: forward formulas, backward against finite differences
// =====================================================================================================================

TEST_CASE("gemm equals a triple loop for every transpose, with strides, alpha and beta", "[cpu][matmul]") {
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const int M = 5, N = 7, K = 3, pad = 2;  // pad: extra columns, so lda/ldb/ldc exceed the matrix widths
  const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
  const int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
  Vec A = rnd(a_rows * lda, 1), B = rnd(b_rows * ldb, 2);
  Vec C = rnd(M * ldc, 3), ref = C;
  const double alpha = 0.7, beta = -0.3;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k)
        acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      ref[i * ldc + j] = alpha * acc + beta * C[i * ldc + j];
    }
  cpu::gemm<double>(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  CHECK(all_close(C, ref, 1e-14, 1e-13) == "");  // padding columns of C keep their value (ref copied them)
}

TEST_CASE("embedding: forward gathers rows; backward accumulates and is the FD gradient", "[cpu][embedding]") {
  const int64_t V = 6, D = 5;
  std::vector<int32_t> tokens{3, 0, 3, 5, 3, 1, 0};  // repeated tokens: their gradients must add up
  const int64_t N = int64_t(tokens.size());
  Vec table = rnd(V * D, 1), out = zeros(N * D);
  cpu::embedding_fwd<double>(out.data(), tokens.data(), table.data(), N, D, V);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) REQUIRE(out[n * D + d] == table[tokens[n] * D + d]);

  const Vec R = rnd(N * D, 2), dtable0 = rnd(V * D, 3);
  Vec dtable = dtable0;
  cpu::embedding_bwd<double>(dtable.data(), tokens.data(), R.data(), N, D, V);
  Vec grad(dtable.size());
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = dtable[i] - dtable0[i];
  auto loss = [&] {
    cpu::embedding_fwd<double>(out.data(), tokens.data(), table.data(), N, D, V);
    return dot(R, out);
  };
  CHECK(check_fd(table, grad, loss) == "");

  std::vector<int32_t> bad{0, int32_t(V)};
  CHECK_THROWS_AS(cpu::embedding_fwd<double>(out.data(), bad.data(), table.data(), 2, D, V), RuntimeError);
}

TEST_CASE("rmsnorm: forward formula; backward accumulates and matches FD for x and w", "[cpu][rmsnorm]") {
  const int64_t N = GENERATE(1, 5), D = GENERATE(7, 16);
  const double eps = 1e-5;
  Vec x = rnd(N * D, 1, -2, 2), w = rnd(D, 2, 0.5, 1.5);
  Vec y = zeros(N * D), rstd = zeros(N);
  cpu::rmsnorm_fwd<double>(y.data(), rstd.data(), x.data(), w.data(), N, D, eps);
  for (int64_t n = 0; n < N; ++n) {
    double ms = 0;
    for (int64_t j = 0; j < D; ++j) ms += x[n * D + j] * x[n * D + j] / double(D);
    CHECK(rstd[n] == Approx(1 / std::sqrt(ms + eps)).epsilon(1e-14));
    for (int64_t j = 0; j < D; ++j)
      CHECK(y[n * D + j] == Approx(w[j] * x[n * D + j] / std::sqrt(ms + eps)).epsilon(1e-14));
  }

  const Vec R = random_vector<double>(y.size(), 3);
  const Vec dx0 = random_vector<double>(x.size(), 4), dw0 = random_vector<double>(w.size(), 5);
  Vec dx = dx0, dw = dw0;
  cpu::rmsnorm_bwd<double>(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, D);
  Vec gx(x.size()), gw(w.size());
  for (size_t i = 0; i < gx.size(); ++i) gx[i] = dx[i] - dx0[i];
  for (size_t i = 0; i < gw.size(); ++i) gw[i] = dw[i] - dw0[i];
  Vec r2 = zeros(N);
  auto loss = [&] {
    cpu::rmsnorm_fwd<double>(y.data(), r2.data(), x.data(), w.data(), N, D, eps);
    return dot(R, y);
  };
  CHECK(check_fd(x, gx, loss) == "");
  CHECK(check_fd(w, gw, loss) == "");
}

TEST_CASE("rope: forward is the complex rotation; inverse undoes it and is the FD gradient", "[cpu][rope]") {
  AttnShape s;
  s.B = GENERATE(1, 3);
  s.T = GENERATE(1, 7);
  s.H = 2;
  s.d_head = GENERATE(16, 32);
  const double theta = 10000;
  const int64_t D = int64_t(s.H) * s.d_head, N = int64_t(s.B) * s.T;
  const Vec x0 = rnd(N * 3 * D, 1);
  Vec x = x0;
  cpu::rope<double>(x.data(), s, theta, false);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t c = 0; c < 3 * D; c += 2) {
        const int64_t o = (b * s.T + t) * 3 * D + c;
        const int64_t i = (c % D % s.d_head) / 2;  // pair index within the head
        std::complex<double> z(x0[o], x0[o + 1]);
        if (c < 2 * D) z *= std::polar(1.0, double(t) * std::pow(theta, -2.0 * double(i) / double(s.d_head)));
        CHECK(x[o] == Approx(z.real()).margin(1e-14));  // v (c >= 2D) must be untouched
        CHECK(x[o + 1] == Approx(z.imag()).margin(1e-14));
      }
  Vec back = x;
  cpu::rope<double>(back.data(), s, theta, true);
  CHECK(all_close(back, x0, 1e-14, 1e-13) == "");

  // L = <R, rope(x)>, so dL/dx = rope(R, inverse)
  const Vec R = random_vector<double>(x.size(), 2);
  Vec grad = R;
  cpu::rope<double>(grad.data(), s, theta, true);
  Vec xin = x0, y;
  auto loss = [&] {
    y = xin;
    cpu::rope<double>(y.data(), s, theta, false);
    return dot(R, y);
  };
  CHECK(check_fd(xin, grad, loss) == "");
}

TEST_CASE("attention (naive and flash2 reference): forward equals loops; backward equals FD", "[cpu][attention]") {
  AttnShape s;
  s.T = GENERATE(1, 7, 13);
  s.d_head = GENERATE(16, 32, 64);
  s.B = GENERATE(1, 3);
  s.causal = GENERATE(false, true);
  const bool flash = GENERATE(false, true);
  s.H = 2;
  s.scale = float(1 / std::sqrt(double(s.d_head)));
  const int64_t Bq = 8, Bk = 4;  // small tiles, so T = 7 and 13 span several ragged tiles
  CAPTURE(s.T, s.d_head, s.B, s.causal, flash);
  const int64_t D = int64_t(s.H) * s.d_head, N = int64_t(s.B) * s.T;
  Vec qkv = rnd(N * 3 * D, 7, -2, 2);
  Vec out = zeros(N * D), lse = zeros(s.B * s.H * s.T), probs = zeros(s.B * s.H * s.T * s.T);
  auto forward = [&] {
    if (flash)
      cpu::attention_flash2_fwd<double>(s, out.data(), lse.data(), qkv.data(), Bq, Bk);
    else
      cpu::attention_naive_fwd<double>(s, out.data(), lse.data(), probs.data(), qkv.data());
  };
  forward();
  Vec out_ref, lse_ref;
  attention_loops(s, qkv, out_ref, lse_ref);
  CHECK(all_close(out, out_ref, 1e-13, 1e-12) == "");
  CHECK(all_close(lse, lse_ref, 1e-13, 1e-12) == "");

  const Vec R = random_vector<double>(out.size(), 8);  // L = <R, out>, so dout = R
  Vec dqkv(qkv.size(), std::nan(""));                  // overwritten: NaNs must not survive
  if (flash)
    cpu::attention_flash2_bwd<double>(s, dqkv.data(), R.data(), qkv.data(), out.data(), lse.data(), Bq, Bk);
  else
    cpu::attention_naive_bwd<double>(s, dqkv.data(), R.data(), qkv.data(), probs.data());
  CHECK(std::all_of(dqkv.begin(), dqkv.end(), [](double v) { return std::isfinite(v); }));
  auto loss = [&] {
    forward();
    return dot(R, out);
  };
  CHECK(check_fd(qkv, dqkv, loss, 200) == "");
}

TEST_CASE("swiglu: forward formula; backward equals FD", "[cpu][swiglu]") {
  const int64_t N = 3, F = 9;
  Vec ab = rnd(N * 2 * F, 1, -6, 6), g = zeros(N * F);
  cpu::swiglu_fwd<double>(g.data(), ab.data(), N, F);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t f = 0; f < F; ++f) {
      const double a = ab[n * 2 * F + f], b = ab[n * 2 * F + F + f];
      CHECK(g[n * F + f] == Approx(a / (1 + std::exp(-a)) * b).epsilon(1e-14));
    }
  const Vec R = random_vector<double>(g.size(), 2);
  Vec dab(ab.size(), std::nan(""));
  cpu::swiglu_bwd<double>(dab.data(), R.data(), ab.data(), N, F);
  CHECK(std::all_of(dab.begin(), dab.end(), [](double v) { return std::isfinite(v); }));
  auto loss = [&] {
    cpu::swiglu_fwd<double>(g.data(), ab.data(), N, F);
    return dot(R, g);
  };
  CHECK(check_fd(ab, dab, loss) == "");
}

TEST_CASE("cross_entropy: losses, FD gradient, aliasing, shift invariance", "[cpu][xent]") {
  const int64_t N = 4, V = 11;
  const double dscale = 0.37;
  Vec logits = rnd(N * V, 1, -3, 3);
  std::vector<int32_t> targets{0, 10, 4, 4};
  Vec losses = zeros(N), dlogits(logits.size());
  cpu::cross_entropy<double>(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, dscale);
  for (int64_t n = 0; n < N; ++n) {
    double z = 0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits[n * V + j]);
    CHECK(losses[n] == Approx(std::log(z) - logits[n * V + targets[n]]).epsilon(1e-14));
  }
  Vec l2 = zeros(N);
  auto loss = [&] {
    cpu::cross_entropy<double>(l2.data(), nullptr, logits.data(), targets.data(), N, V, 0.0);
    return dscale * std::accumulate(l2.begin(), l2.end(), 0.0);
  };
  CHECK(check_fd(logits, dlogits, loss) == "");

  Vec inplace = logits, l3 = zeros(N);  // dlogits aliasing logits
  cpu::cross_entropy<double>(l3.data(), inplace.data(), inplace.data(), targets.data(), N, V, dscale);
  CHECK(all_close(inplace, dlogits, 0, 0) == "");
  CHECK(all_close(l3, losses, 0, 0) == "");

  Vec shifted = logits;  // +500 would overflow exp without the max subtraction
  for (auto& v : shifted) v += 500;
  cpu::cross_entropy<double>(l3.data(), nullptr, shifted.data(), targets.data(), N, V, 1.0);
  CHECK(all_close(l3, losses, 1e-12, 1e-12) == "");

  std::vector<int32_t> bad{0, 0, 0, int32_t(V)};
  CHECK_THROWS_AS(cpu::cross_entropy<double>(l3.data(), nullptr, logits.data(), bad.data(), N, V, 1.0), RuntimeError);
}

TEST_CASE("sum, sum_squares, scale, add_inplace", "[cpu][elementwise]") {
  const int64_t n = 1000;
  std::vector<float> x(1000);
  std::iota(x.begin(), x.end(), 1.0f);  // 1..n
  CHECK(cpu::sum<float>(x.data(), n) == double(n) * (n + 1) / 2);
  CHECK(cpu::sum_squares<float>(x.data(), n) == double(n) * (n + 1) * (2 * n + 1) / 6);
  Vec a{1, -2, 3}, b{0.5, 0.25, -4};
  cpu::add_inplace<double>(a.data(), b.data(), 3);
  CHECK(a == Vec{1.5, -1.75, -1});
  cpu::scale<double>(a.data(), 3, -2.0);
  CHECK(a == Vec{-3, 3.5, 2});
}

TEST_CASE("adamw: two steps equal a hand-computed reference (numpy, float64)", "[cpu][adamw]") {
  // Hyper-parameters exact in binary, so their fp32 constants equal the double values the reference uses.
  AdamWArgs a;
  a.lr = 0.0625f;
  a.weight_decay = 0.125f;
  a.beta1 = 0.875f;
  a.beta2 = 0.984375f;
  a.eps = std::ldexp(1.0f, -20);
  a.grad_scale = 0.5f;
  Vec p{0.5, -1.25, 2.0, 0.0}, m(4, 0.0), v(4, 0.0);
  const Vec g1{0.1, -0.2, 0.3, 0.0}, g2{-0.4, 0.05, 0.3, 1.0};
  a.t = 1;
  cpu::adamw<double>(p.data(), g1.data(), m.data(), v.data(), 4, a);
  // step 1 in closed form: p = p0 (1 - lr wd) - lr g' / (|g'| + eps / sqrt(1 - b2)), g' = grad_scale g
  CHECK(p[0] == Approx(0.5 * (1 - 0.0625 * 0.125) - 0.0625 * 0.05 / (0.05 + std::ldexp(1.0, -20) / 0.125))
                    .epsilon(1e-15));
  CHECK(all_close(p, Vec{0.43360328528819453, -1.177739143007812, 1.9218781787527084, 0.0}, 0, 1e-14) == "");
  CHECK(all_close(m, Vec{0.00625, -0.0125, 0.01875, 0.0}, 0, 1e-14) == "");
  CHECK(all_close(v, Vec{3.906250000000001e-05, 0.00015625000000000003, 0.0003515625, 0.0}, 0, 1e-14) == "");
  a.t = 2;
  cpu::adamw<double>(p.data(), g2.data(), m.data(), v.data(), 4, a);
  CHECK(all_close(p, Vec{0.4658198402560329, -1.1398572838098058, 1.8443657620640252, -0.046955232143286695}, 0,
                  1e-14) == "");
  CHECK(all_close(m, Vec{-0.01953125, -0.0078125, 0.03515625, 0.0625}, 0, 1e-14) == "");
  CHECK(all_close(v, Vec{0.0006634521484375002, 0.00016357421875000004, 0.0006976318359375, 0.00390625}, 0, 1e-14) ==
        "");
}

// =====================================================================================================================
// 2. CpuBackend (fp32) against the double templates
// =====================================================================================================================

TEST_CASE("CpuBackend: description, memory, events, copies, fill, cast, dtype errors", "[cpu][backend]") {
  CpuBackend be;
  CHECK(be.name() == "cpu");
  CHECK(be.device() == Device::cpu);
  CHECK(std::regex_match(be.description(), std::regex(R"(CPU \(OpenBLAS [0-9.]+, [0-9]+ threads\))")));
  {
    Buffer buf = be.alloc(1000, Category::activations);
    CHECK(reinterpret_cast<uintptr_t>(buf.data()) % 64 == 0);
    CHECK(be.memory().current[int(Category::activations)] == 1000);
    Tensor t = buf.view(DType::f32, {10, 25});
    be.fill(t, 2.5f);
    std::vector<float> host(250);
    be.copy_to_host(host.data(), t.data, t.bytes());
    CHECK(std::all_of(host.begin(), host.end(), [](float v) { return v == 2.5f; }));
    host[7] = -1;
    be.copy_from_host(t.data, host.data(), t.bytes());
    std::vector<float> other(250);
    Tensor u = t32(other, {250});
    be.cast(u, t.reshape({250}));
    CHECK(other == host);
    CHECK(be.sum(t) == Approx(249 * 2.5 - 1));
  }
  CHECK(be.memory().current[int(Category::activations)] == 0);
  CHECK(be.memory().peak_total == 1000);

  auto e0 = be.make_event(), e1 = be.make_event();
  be.record(*e0);
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + std::sqrt(double(i));
  be.record(*e1);
  CHECK(be.elapsed_ms(*e0, *e1) >= 0.f);

  // bf16 activations are CUDA-only (bf16 storage ops: tests/test_bf16_storage.cpp).
  std::vector<uint16_t> half(24);
  std::vector<float> f24(24), f12(12), f8(8), r4(4), r2(2);
  Tensor bf(half.data(), DType::bf16, Device::cpu, {2, 12});
  AttnShape s;
  s.B = 1, s.T = 2, s.H = 2, s.d_head = 2;
  CHECK_THROWS_AS(be.rope(bf, s, 10000.f, false), RuntimeError);
  CHECK_THROWS_AS(be.attention_fwd(AttnImpl::flash2, s, t32(f8, {2, 4}), t32(r4, {4}), Tensor(), bf), RuntimeError);
  CHECK_THROWS_AS(be.swiglu_fwd(t32(f12, {2, 6}), bf), RuntimeError);
  CHECK_THROWS_AS(be.rmsnorm_fwd(t32(f24, {2, 12}), t32(r2, {2}), bf, t32(f12, {12}), 1e-5f), RuntimeError);
  std::vector<int32_t> tg(2, 0);
  CHECK_THROWS_AS(be.cross_entropy(t32(r2, {2}), Tensor(), bf, Tensor(tg.data(), DType::i32, Device::cpu, {2}), 1.f),
                  RuntimeError);
  std::vector<float> a(6), b(6), c(4);
  CHECK_THROWS_AS(be.matmul(t32(c, {2, 2}), t32(a, {2, 3}), false, t32(b, {2, 3}), false, 1, 0), RuntimeError);
}

TEST_CASE("CpuBackend matmul (f32) matches the double gemm; 3-D tensors fold into rows", "[cpu][backend][matmul]") {
  CpuBackend be;
  const bool ta = GENERATE(false, true), tb = GENERATE(false, true);
  const float beta = GENERATE(0.f, 1.f);
  const int64_t M = 2 * 9, N = 13, K = 31;  // A is [2, 9, K] when not transposed
  Vec A = rnd(M * K, 1), B = rnd(K * N, 2);
  Vec C = rnd(M * N, 3);
  auto Af = to_f32(A), Bf = to_f32(B), Cf = to_f32(C);
  Tensor tA = ta ? t32(Af, {K, M}) : t32(Af, {2, 9, K});
  Tensor tB = tb ? t32(Bf, {N, K}) : t32(Bf, {K, N});
  be.matmul(t32(Cf, {M, N}), tA, ta, tB, tb, 0.5f, beta);
  cpu::gemm<double>(ta, tb, M, N, K, 0.5, A.data(), ta ? M : K, B.data(), tb ? K : N, beta, C.data(), N);
  CHECK(rel_err(Cf, C) < 1e-5);
}

TEST_CASE("CpuBackend matmul_add: D = op(A) op(B) + R, R untouched; a mismatched R is an error",
          "[cpu][backend][matmul]") {
  CpuBackend be;
  const int64_t M = 11, N = 7, K = 19;
  Vec A = rnd(M * K, 4), B = rnd(N * K, 5), R = rnd(M * N, 6), D(size_t(M * N), 0.0);
  auto Af = to_f32(A), Bf = to_f32(B), Rf = to_f32(R), Df = to_f32(D);
  const auto R0 = Rf;
  be.matmul_add(t32(Df, {M, N}), t32(Af, {M, K}), false, t32(Bf, {N, K}), true, t32(Rf, {M, N}));
  Vec ref = R;
  cpu::gemm<double>(false, true, M, N, K, 1.0, A.data(), K, B.data(), K, 1.0, ref.data(), N);
  CHECK(rel_err(Df, ref) < 1e-5);
  CHECK(Rf == R0);
  auto bad = to_f32(rnd(M * (N + 1), 7));
  CHECK_THROWS_AS(be.matmul_add(t32(Df, {M, N}), t32(Af, {M, K}), false, t32(Bf, {N, K}), true, t32(bad, {M, N + 1})),
                  RuntimeError);
}

TEST_CASE("CpuBackend ops (f32) match the double templates", "[cpu][backend]") {
  CpuBackend be;
  const double tol = 1e-5;

  SECTION("embedding") {
    const int64_t V = 50, D = 24;
    auto tokens = random_ids(37, int32_t(V), 1);
    const int64_t N = int64_t(tokens.size());
    Vec table = rnd(V * D, 2), dout = rnd(N * D, 3);
    Vec out = zeros(N * D), dtable = rnd(V * D, 4);
    auto tf = to_f32(table), of = to_f32(out), df = to_f32(dout), dtf = to_f32(dtable);
    be.embedding_fwd(t32(of, {N, D}), ti32(tokens), t32(tf, {V, D}));
    be.embedding_bwd(t32(dtf, {V, D}), ti32(tokens), t32(df, {N, D}));
    cpu::embedding_fwd<double>(out.data(), tokens.data(), table.data(), N, D, V);
    cpu::embedding_bwd<double>(dtable.data(), tokens.data(), dout.data(), N, D, V);
    CHECK(rel_err(of, out) < tol);
    CHECK(rel_err(dtf, dtable) < tol);
  }
  SECTION("rmsnorm") {
    const int64_t N = 19, D = 96;
    Vec x = rnd(N * D, 1, -3, 3), w = rnd(D, 2, 0.5, 1.5);
    Vec dy = rnd(N * D, 3), dx = rnd(N * D, 4);
    Vec dw = rnd(D, 5), y = zeros(N * D), rstd = zeros(N);
    auto xf = to_f32(x), wf = to_f32(w), dyf = to_f32(dy), dxf = to_f32(dx), dwf = to_f32(dw), yf = to_f32(y),
         rf = to_f32(rstd);
    be.rmsnorm_fwd(t32(yf, {N, D}), t32(rf, {N}), t32(xf, {N, D}), t32(wf, {D}), 1e-5f);
    be.rmsnorm_bwd(t32(dxf, {N, D}), t32(dwf, {D}), t32(dyf, {N, D}), t32(xf, {N, D}), t32(wf, {D}), t32(rf, {N}));
    cpu::rmsnorm_fwd<double>(y.data(), rstd.data(), x.data(), w.data(), N, D, double(1e-5f));
    cpu::rmsnorm_bwd<double>(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D);
    CHECK(rel_err(yf, y) < tol);
    CHECK(rel_err(rf, rstd) < tol);
    CHECK(rel_err(dxf, dx) < tol);
    CHECK(rel_err(dwf, dw) < tol);
  }
  SECTION("rope") {
    AttnShape s;
    s.B = 2, s.T = 45, s.H = 3, s.d_head = 32;
    const bool inverse = GENERATE(false, true);
    const int64_t n = int64_t(s.B) * s.T * 3 * s.H * s.d_head;
    Vec x = rnd(n, 1);
    auto xf = to_f32(x);
    be.rope(t32(xf, {s.B * s.T, 3 * s.H * s.d_head}), s, 10000.f, inverse);
    cpu::rope<double>(x.data(), s, 10000.0, inverse);
    CHECK(rel_err(xf, x) < tol);
  }
  SECTION("attention") {
    AttnShape s;
    s.B = 2, s.T = 70, s.H = 2, s.d_head = 32;  // T = 70: one full 64-tile and a ragged one
    s.causal = GENERATE(false, true);
    s.scale = float(1 / std::sqrt(32.0));
    const AttnImpl impl = GENERATE(AttnImpl::naive, AttnImpl::flash2);
    CAPTURE(s.causal, int(impl));
    const int64_t N = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
    Vec qkv = rnd(N * 3 * D, 1, -2, 2), dout = rnd(N * D, 2);
    Vec out = zeros(N * D), lse = zeros(s.B * s.H * s.T), probs = zeros(s.B * s.H * s.T * s.T);
    Vec dqkv = zeros(N * 3 * D);
    auto qf = to_f32(qkv), dof = to_f32(dout), of = to_f32(out), lf = to_f32(lse), pf = to_f32(probs),
         dqf = to_f32(dqkv);
    Tensor tprobs = impl == AttnImpl::naive ? t32(pf, {s.B, s.H, s.T, s.T}) : Tensor();
    be.attention_fwd(impl, s, t32(of, {N, D}), t32(lf, {s.B, s.H, s.T}), tprobs, t32(qf, {N, 3 * D}));
    be.attention_bwd(impl, s, t32(dqf, {N, 3 * D}), t32(dof, {N, D}), t32(qf, {N, 3 * D}), t32(of, {N, D}),
                     t32(lf, {s.B, s.H, s.T}), tprobs);
    cpu::attention_naive_fwd<double>(s, out.data(), lse.data(), probs.data(), qkv.data());
    cpu::attention_naive_bwd<double>(s, dqkv.data(), dout.data(), qkv.data(), probs.data());
    CHECK(rel_err(of, out) < tol);
    CHECK(rel_err(lf, lse) < tol);
    CHECK(rel_err(dqf, dqkv) < tol);
    if (impl == AttnImpl::naive) CHECK(rel_err(pf, probs) < tol);
  }
  SECTION("swiglu") {
    const int64_t N = 11, F = 40;
    Vec ab = rnd(N * 2 * F, 1, -5, 5), dg = rnd(N * F, 2);
    Vec g = zeros(N * F), dab(ab.size());
    auto abf = to_f32(ab), dgf = to_f32(dg), gf = to_f32(g), dabf = to_f32(dab);
    be.swiglu_fwd(t32(gf, {N, F}), t32(abf, {N, 2 * F}));
    be.swiglu_bwd(t32(dabf, {N, 2 * F}), t32(dgf, {N, F}), t32(abf, {N, 2 * F}));
    cpu::swiglu_fwd<double>(g.data(), ab.data(), N, F);
    cpu::swiglu_bwd<double>(dab.data(), dg.data(), ab.data(), N, F);
    CHECK(rel_err(gf, g) < tol);
    CHECK(rel_err(dabf, dab) < tol);
  }
  SECTION("cross_entropy (dlogits aliasing logits), sum, sum_squares, scale, add_inplace") {
    const int64_t N = 9, V = 1000;
    Vec logits = rnd(N * V, 1, -8, 8), losses = zeros(N), dlogits = zeros(N * V);
    auto targets = random_ids(9, int32_t(V), 2);
    auto lf = to_f32(logits), lossf = to_f32(losses);
    logits = to_f64(lf);
    be.cross_entropy(t32(lossf, {N}), t32(lf, {N, V}), t32(lf, {N, V}), ti32(targets), 1.f / N);
    cpu::cross_entropy<double>(losses.data(), dlogits.data(), logits.data(), targets.data(), N, V, 1.0 / N);
    CHECK(rel_err(lossf, losses) < tol);
    CHECK(rel_err(lf, dlogits) < tol);

    Vec x = random_vector<double>(5000, 3), y = random_vector<double>(5000, 4);
    auto xf = to_f32(x), yf = to_f32(y);
    x = to_f64(xf), y = to_f64(yf);
    CHECK(be.sum(t32(xf, {50, 100})) == Approx(cpu::sum<double>(x.data(), 5000)).epsilon(1e-12));
    CHECK(be.sum_squares(t32(xf, {5000})) == Approx(cpu::sum_squares<double>(x.data(), 5000)).epsilon(1e-12));
    be.add_inplace(t32(xf, {5000}), t32(yf, {50, 100}));
    be.scale(t32(xf, {5000}), 0.3f);
    cpu::add_inplace<double>(x.data(), y.data(), 5000);
    cpu::scale<double>(x.data(), 5000, double(0.3f));
    CHECK(rel_err(xf, x) < tol);
  }
  SECTION("adamw, three steps") {
    const int64_t n = 777;
    AdamWArgs a;  // DESIGN.md defaults, with clipping folded in
    a.grad_scale = 0.8f;
    Vec p = rnd(n, 1), m = zeros(n), v = zeros(n);
    auto pf = to_f32(p), mf = to_f32(m), vf = to_f32(v);
    p = to_f64(pf);
    for (int t = 1; t <= 3; ++t) {
      a.t = t;
      auto gf = to_f32(rnd(n, 10 + t));
      const Vec g = to_f64(gf);
      be.adamw(t32(pf, {n}), t32(gf, {n}), t32(mf, {n}), t32(vf, {n}), Tensor(), a);
      cpu::adamw<double>(p.data(), g.data(), m.data(), v.data(), n, a);
    }
    CHECK(rel_err(pf, p) < tol);
    CHECK(rel_err(mf, m) < tol);
    CHECK(rel_err(vf, v) < tol);
  }
}
