// bf16 storage of parameters, gradients and AdamW state on the CPU backend (pure-bf16 training, emulated).
//
// Every result is checked against a reference computed here in double precision and rounded to bf16 by this file's
// own rounding (frexp / floor on doubles, written independently of backend/bf16.h). The backend computes in fp32,
// so its value before rounding differs from the double reference by a few fp32 ulps of the terms (tol, estimated
// per element); a result that is the rounding of some value within tol of the reference but not of the reference
// itself is "ambiguous" (near a rounding midpoint, or after cancellation); every other element must be bitwise the
// reference's rounding, and ambiguous elements must stay rare (they are counted).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace {

using namespace trainer;
using Vec = std::vector<double>;
using Bits = std::vector<uint16_t>;

// ---- the test's own bf16 ------------------------------------------------------------------------------------------

/// The two bf16 values around x (lo <= x < hi, or lo == x when x is one) and where x lies between them.
struct Bracket {
  double lo, hi, frac;  // frac = (x - lo) / (hi - lo) in [0, 1)
  bool lo_even;         // lo's significand is even (ties go there)
};
Bracket bracket(double x) {
  if (x == 0) return {0, 0, 0, true};
  int e = 0;
  std::frexp(x, &e);                                      // |x| = f 2^e, f in [0.5, 1)
  const double step = std::ldexp(1.0, std::max(e - 8, -133));  // 8 significant bits; subnormal spacing 2^-133
  const double q = x / step, fl = std::floor(q);
  return {fl * step, (fl + 1) * step, q - fl, std::fmod(std::fabs(fl), 2.0) == 0};
}
/// x rounded to bf16, to nearest even, in double (+-inf past the largest bf16 midpoint).
double rne(double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const Bracket b = bracket(x);
  const double r = b.frac < 0.5 ? b.lo : b.frac > 0.5 ? b.hi : (b.lo_even ? b.lo : b.hi);
  return std::fabs(r) >= std::ldexp(1.0, 128) ? std::copysign(INFINITY, x) : r;
}
/// The bits of a value that is a bf16 (the upper half of its float).
uint16_t bits_of(double bf16_value) {
  const float f = float(bf16_value);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  REQUIRE((u & 0xffffu) == 0);
  return uint16_t(u >> 16);
}
double value_of(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
Bits to_bits(const Vec& v) {  // v rounded to bf16 (to nearest even), as bits
  Bits b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bits_of(rne(v[i]));
  return b;
}
Vec values(const Bits& b) {
  Vec v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = value_of(b[i]);
  return v;
}

Vec rnd(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

Tensor tb(Bits& b, std::initializer_list<int64_t> shape, int64_t offset = 0) {
  Tensor t(b.data() + offset, DType::bf16, Device::cpu, shape);
  REQUIRE(offset + t.numel() <= int64_t(b.size()));
  return t;
}
Tensor tf(std::vector<float>& v, std::initializer_list<int64_t> shape) {
  Tensor t(v.data(), DType::f32, Device::cpu, shape);
  REQUIRE(t.numel() == int64_t(v.size()));
  return t;
}
std::vector<float> to_float(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

/// Counts bf16 results against double references: exact (the reference's rounding to nearest even), ambiguous (the
/// other neighbour, the reference within `tol` of a midpoint), bad (anything else; the first few are described).
struct RneCheck {
  size_t exact = 0, ambiguous = 0, bad = 0;
  std::ostringstream report;
  void add(double got, double ref, double tol, const char* what, size_t i) {
    const double want = rne(ref);
    if (got == want || (std::isnan(got) && std::isnan(want))) {
      ++exact;
      return;
    }
    if (rne(ref - tol) <= got && got <= rne(ref + tol)) {  // the rounding of some value within tol of ref
      ++ambiguous;
      return;
    }
    if (++bad <= 5)
      report << what << "[" << i << "]: got " << got << ", reference " << ref << " rounds to " << want << "; ";
  }
  /// No bad element, and at most 1% (or 2) ambiguous.
  void require(const std::string& name) const {
    INFO(name << ": exact " << exact << ", ambiguous " << ambiguous << ", bad " << bad << ": " << report.str());
    CHECK(bad == 0);
    CHECK(exact > 0);
    CHECK((ambiguous <= 2 || ambiguous * 100 <= exact + ambiguous));
  }
};

// ---- AdamW reference ------------------------------------------------------------------------------------------------

struct Step {  // one element's update in double, and its error scale for the fp32 computation
  double p, m, v, tol_p, tol_m, tol_v;
};
/// The course's AdamW (DESIGN.md) on one element, in double: g' = gs g; p -= lr wd p; m = b1 m + (1 - b1) g';
/// v = b2 v + (1 - b2) g'^2; p -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps).
Step adamw_ref(double p, double g, double m, double v, const AdamWArgs& a) {
  const double gs = double(a.grad_scale) * g, b1 = a.beta1, b2 = a.beta2, t = double(a.t);
  const double decay = double(a.lr) * double(a.weight_decay);
  const double alpha = double(a.lr) * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
  Step s;
  const double p1 = p - decay * p;
  s.m = b1 * m + (1 - b1) * gs;
  s.v = b2 * v + (1 - b2) * gs * gs;
  const double u = alpha * s.m / (std::sqrt(s.v) + double(a.eps));
  s.p = p1 - u;
  constexpr double kF32 = 1e-6;  // ~16 fp32 ulps: the fp32 evaluation's error, relative to the terms' sizes
  s.tol_p = kF32 * (std::fabs(p) + std::fabs(u));
  s.tol_m = kF32 * (std::fabs(b1 * m) + std::fabs((1 - b1) * gs));
  s.tol_v = kF32 * (std::fabs(b2 * v) + std::fabs((1 - b2) * gs * gs));
  return s;
}

AdamWArgs adamw_args() {
  AdamWArgs a;
  a.lr = 1e-2f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f, a.grad_scale = 0.5f;
  return a;
}

}  // namespace

TEST_CASE("bf16 adamw equals a double reference rounded to nearest even, on odd lengths and offsets", "[bf16][adamw]") {
  CpuBackend be;
  AdamWArgs a = adamw_args();
  RneCheck chk;
  for (int64_t n : {1, 7, 64, 1001, 4099})
    for (int64_t off : {0, 3, 64}) {
      CAPTURE(n, off);
      const size_t total = size_t(off + n + 5);  // guard elements either side of the range
      Bits p = to_bits(rnd(total, 1 + n)), m(total, 0), v(total, 0);
      for (int64_t t = 1; t <= 3; ++t) {
        a.t = t;
        const Bits g = to_bits(rnd(total, 100 * t + n, -2, 2));
        const Bits p0 = p, m0 = m, v0 = v;
        Bits gc = g;
        double want_sumsq = 0;
        for (int64_t i = off; i < off + n; ++i) want_sumsq += value_of(g[i]) * value_of(g[i]);
        a.grad_sumsq = t != 2;
        const double sumsq = be.adamw(tb(p, {n}, off), tb(gc, {n}, off), tb(m, {n}, off), tb(v, {n}, off), Tensor(), a);
        CHECK(sumsq == Approx(a.grad_sumsq ? want_sumsq : 0.0).epsilon(1e-12));
        CHECK(gc == g);
        for (size_t i = 0; i < total; ++i) {
          if (int64_t(i) < off || int64_t(i) >= off + n) {  // outside the range: untouched
            CHECK(p[i] == p0[i]);
            CHECK(m[i] == m0[i]);
            CHECK(v[i] == v0[i]);
            continue;
          }
          const Step s = adamw_ref(value_of(p0[i]), value_of(g[i]), value_of(m0[i]), value_of(v0[i]), a);
          chk.add(value_of(p[i]), s.p, s.tol_p, "p", i);
          chk.add(value_of(m[i]), s.m, s.tol_m, "m", i);
          chk.add(value_of(v[i]), s.v, s.tol_v, "v", i);
        }
      }
    }
  chk.require("adamw bf16");
}

TEST_CASE("bf16 adamw: the fused sum of squares to a pointer, and refused mixes", "[bf16][adamw]") {
  CpuBackend be;
  AdamWArgs a = adamw_args();
  const int64_t n = 37;
  Bits p = to_bits(rnd(n, 5)), g = to_bits(rnd(n, 6)), m(n, 0), v(n, 0);
  double want = 0;
  for (uint16_t x : g) want += value_of(x) * value_of(x);
  double to = -1;
  a.grad_sumsq = true;
  a.sumsq_to = &to;
  CHECK(be.adamw(tb(p, {n}), tb(g, {n}), tb(m, {n}), tb(v, {n}), Tensor(), a) == 0.0);
  CHECK(to == Approx(want).epsilon(1e-12));
  a.sumsq_to = nullptr;
  a.grad_sumsq = false;

  std::vector<float> pf(n), gf(n), mf(n), vf(n);
  AdamWArgs sr = a;
  sr.stochastic_rounding = true;
  CHECK_THROWS_AS(be.adamw(tf(pf, {n}), tf(gf, {n}), tf(mf, {n}), tf(vf, {n}), Tensor(), sr), RuntimeError);
  CHECK_THROWS_AS(be.adamw(tb(p, {n}), tf(gf, {n}), tb(m, {n}), tb(v, {n}), Tensor(), a), RuntimeError);
  CHECK_THROWS_AS(be.adamw(tb(p, {n}), tb(g, {n}), tb(m, {n}), tb(v, {n}), tb(g, {n}), a), RuntimeError);
}

TEST_CASE("bf16 adamw, stochastic rounding: deterministic, independent of the split, unbiased", "[bf16][adamw]") {
  CpuBackend be;
  AdamWArgs a = adamw_args();
  a.t = 4;
  a.stochastic_rounding = true;
  a.seed = 0x5eed;
  const int64_t n = 1001, base = 123456789012;  // index_offset: a unit far into the flat layout
  const Bits p0 = to_bits(rnd(n, 11)), g = to_bits(rnd(n, 12)), m0 = to_bits(rnd(n, 13, -0.1, 0.1)),
             v0 = to_bits(rnd(n, 14, 0, 0.01));
  auto run = [&](uint64_t seed, std::vector<int64_t> cuts, Bits& p, Bits& m, Bits& v) {
    p = p0, m = m0, v = v0;
    Bits gc = g;
    AdamWArgs b = a;
    b.seed = seed;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t lo = cuts[k], len = cuts[k + 1] - cuts[k];
      b.index_offset = base + lo;
      be.adamw(tb(p, {len}, lo), tb(gc, {len}, lo), tb(m, {len}, lo), tb(v, {len}, lo), Tensor(), b);
    }
  };
  Bits p1, m1, v1, p2, m2, v2, p3, m3, v3;
  run(a.seed, {0, n}, p1, m1, v1);
  run(a.seed, {0, n}, p2, m2, v2);
  CHECK(p1 == p2);  // deterministic
  run(a.seed, {0, 333, 334, n}, p3, m3, v3);
  CHECK(p1 == p3);  // three calls (odd lengths) with index_offset == one call
  CHECK(m1 == m3);
  CHECK(v1 == v3);

  RneCheck chk;  // m and v stay round-to-nearest-even; p is one of the two bf16 neighbours of the exact value
  size_t p_bad = 0, p_differs_from_rne = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Step s = adamw_ref(value_of(p0[i]), value_of(g[i]), value_of(m0[i]), value_of(v0[i]), a);
    chk.add(value_of(m1[i]), s.m, s.tol_m, "m", size_t(i));
    chk.add(value_of(v1[i]), s.v, s.tol_v, "v", size_t(i));
    const Bracket b = bracket(s.p);
    if (std::fabs(value_of(p1[i]) - s.p) > (b.hi - b.lo) + s.tol_p) ++p_bad;
    p_differs_from_rne += value_of(p1[i]) != rne(s.p);
  }
  chk.require("adamw bf16 stochastic m, v");
  CHECK(p_bad == 0);
  CHECK(p_differs_from_rne > size_t(n) / 10);  // stochastic: often the other neighbour (~1/4 of elements)

  Bits p4, m4, v4;
  run(a.seed + 1, {0, n}, p4, m4, v4);
  size_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += p4[i] != p1[i];
  CHECK(differ > size_t(n) / 10);  // another seed, other roundings (expected ~1/3 of elements)
  CHECK(m4 == m1);

  // Unbiased: E[round(x)] = x. (i) One element's state repeated over many indices in one call; (ii) a few elements
  // over many seeds. Mean within 5 standard errors of the exact value, where round to nearest even is far outside.
  auto check_mean = [](double sum, size_t count, double exact) {
    const Bracket b = bracket(exact);
    const double f = b.frac, se = (b.hi - b.lo) * std::sqrt(f * (1 - f) / double(count));
    const double mean = sum / double(count);
    INFO("exact " << exact << " (between " << b.lo << " and " << b.hi << "), mean " << mean << ", se " << se);
    CHECK(std::fabs(mean - exact) <= 5 * se);
    CHECK(std::fabs(rne(exact) - exact) > 20 * se);  // the test can tell stochastic from nearest rounding
  };
  {
    // p chosen so that the exact new value lies well inside a bf16 step (f between 0.2 and 0.8)
    const double gq = rne(0.3), mq = rne(0.02), vq = rne(0.003);
    AdamWArgs b = a;
    double pv = rne(0.7);
    Step s = adamw_ref(pv, gq, mq, vq, b);
    for (int tries = 0; bracket(s.p).frac < 0.2 || bracket(s.p).frac > 0.8; ++tries) {
      REQUIRE(tries < 100);
      pv = rne(pv + 1.0 / 64);
      s = adamw_ref(pv, gq, mq, vq, b);
    }
    const size_t N = 40000;
    Bits p(N, bits_of(pv)), gg(N, bits_of(gq)), m(N, bits_of(mq)), v(N, bits_of(vq));
    b.index_offset = 77;
    const int64_t nn = int64_t(N);
    be.adamw(tb(p, {nn}), tb(gg, {nn}), tb(m, {nn}), tb(v, {nn}), Tensor(), b);
    double sum = 0;
    for (uint16_t x : p) sum += value_of(x);
    check_mean(sum, N, s.p);
  }
  {
    const int64_t k = 8;
    const size_t seeds = 4000;
    std::vector<double> sum(k, 0.0);
    for (size_t sd = 0; sd < seeds; ++sd) {
      Bits p(p0.begin(), p0.begin() + k), gg(g.begin(), g.begin() + k), m(m0.begin(), m0.begin() + k),
          v(v0.begin(), v0.begin() + k);
      AdamWArgs b = a;
      b.seed = sd;
      be.adamw(tb(p, {k}), tb(gg, {k}), tb(m, {k}), tb(v, {k}), Tensor(), b);
      for (int64_t i = 0; i < k; ++i) sum[i] += value_of(p[i]);
    }
    int checked = 0;
    for (int64_t i = 0; i < k; ++i) {
      const Step s = adamw_ref(value_of(p0[i]), value_of(g[i]), value_of(m0[i]), value_of(v0[i]), a);
      const double f = bracket(s.p).frac;
      if (f < 0.15 || f > 0.85) continue;  // too near a bf16 value for the power check
      CAPTURE(i);
      check_mean(sum[i], seeds, s.p);
      ++checked;
    }
    CHECK(checked >= 2);
  }
}

TEST_CASE("bf16 matmul on the cpu: f32 x bf16 weights, bf16 C accumulated once, bf16 matmul_add", "[bf16][matmul]") {
  CpuBackend be;
  const int64_t M = 2 * 7, N = 13, K = 37;
  const bool trans_b = GENERATE(false, true);
  const float beta = GENERATE(0.f, 1.f);
  CAPTURE(trans_b, beta);
  const float alpha = 0.5f;
  const Vec A = rnd(M * K, 1), C0 = rnd(M * N, 3);
  Bits Bb = to_bits(rnd(K * N, 2));  // B as stored: [K, N], or [N, K] when trans_b
  const Vec Bv = values(Bb);
  const Tensor tB = trans_b ? tb(Bb, {N, K}) : tb(Bb, {K, N});
  // al * sum_k a[i,k] op(B)[k,j] + be * c[i,j], and its error scale for an fp32 evaluation
  auto ref = [&](const Vec& a, const Vec& c, double al, double bt, int64_t i, int64_t j, double& tol) {
    double s = 0, mag = 0;
    for (int64_t k = 0; k < K; ++k) {
      const double bv = trans_b ? Bv[j * K + k] : Bv[k * N + j];
      s += a[i * K + k] * bv;
      mag += std::fabs(a[i * K + k] * bv);
    }
    tol = 1e-6 * (std::fabs(al) * mag + std::fabs(bt * c[i * N + j]));
    return al * s + bt * c[i * N + j];
  };
  {  // f32 activations x bf16 weights -> f32 (a 3-D A folds into rows)
    std::vector<float> Af = to_float(A), Cf = to_float(C0);
    const Vec Av(Af.begin(), Af.end()), Cv(Cf.begin(), Cf.end());
    be.matmul(tf(Cf, {M, N}), tf(Af, {2, 7, K}), false, tB, trans_b, alpha, beta);
    double worst = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double tol;
        const double r = ref(Av, Cv, alpha, beta, i, j, tol);
        worst = std::max(worst, std::fabs(Cf[i * N + j] - r) / (tol + 1e-30));
      }
    CHECK(worst <= 1.0);
  }
  for (int both_bf16 = 0; both_bf16 < 2; ++both_bf16) {  // f32 x f32 -> bf16 C (weight gradients); bf16 x bf16 -> bf16
    CAPTURE(both_bf16);
    std::vector<float> Af = to_float(A), Bf = to_float(Bv);
    Bits Ab = to_bits(A), Cb = to_bits(C0);
    const Vec Av = both_bf16 ? values(Ab) : Vec(Af.begin(), Af.end()), Cv = values(Cb);
    const Tensor tA = both_bf16 ? tb(Ab, {M, K}) : tf(Af, {M, K});
    const Tensor tBB = both_bf16 ? tB : (trans_b ? tf(Bf, {N, K}) : tf(Bf, {K, N}));
    be.matmul(tb(Cb, {M, N}), tA, false, tBB, trans_b, alpha, beta);
    RneCheck chk;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double tol;
        const double r = ref(Av, Cv, alpha, beta, i, j, tol);
        chk.add(value_of(Cb[i * N + j]), r, tol, "C", size_t(i * N + j));
      }
    chk.require("matmul into bf16 C");
  }
  if (beta == 1.f) {  // matmul_add: D = A op(B) + R with D and R bf16
    std::vector<float> Af = to_float(A);
    const Vec Av(Af.begin(), Af.end());
    Bits Rb = to_bits(C0), Db(size_t(M * N), 0);
    const Bits R0 = Rb;
    be.matmul_add(tb(Db, {M, N}), tf(Af, {M, K}), false, tB, trans_b, tb(Rb, {M, N}));
    CHECK(Rb == R0);
    const Vec Rv = values(Rb);
    RneCheck chk;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double tol;
        const double r = ref(Av, Rv, 1.0, 1.0, i, j, tol);
        chk.add(value_of(Db[i * N + j]), r, tol, "D", size_t(i * N + j));
      }
    chk.require("matmul_add bf16");
  }
}

TEST_CASE("bf16 rmsnorm on the cpu: bf16 w in the forward, bf16 dw written or accumulated once", "[bf16][rmsnorm]") {
  CpuBackend be;
  const int64_t N = 13, D = 48;
  const double eps = 1e-5;
  const Vec x = rnd(N * D, 21), dy = rnd(N * D, 22);
  Bits wb = to_bits(rnd(D, 23, 0.5, 1.5));
  const Vec w = values(wb);
  std::vector<float> xf = to_float(x), dyf = to_float(dy), yf(N * D), rs(N), dxf(N * D, 0.f);
  be.rmsnorm_fwd(tf(yf, {N, D}), tf(rs, {N}), tf(xf, {N, D}), tb(wb, {D}), float(eps));
  std::vector<double> r(N);
  double worst = 0;
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xf[n * D + j]) * xf[n * D + j];
    r[n] = 1 / std::sqrt(ss / double(D) + eps);
    for (int64_t j = 0; j < D; ++j) {
      const double want = w[j] * xf[n * D + j] * r[n];
      worst = std::max(worst, std::fabs(yf[n * D + j] - want) / (std::fabs(want) + 1e-6));
    }
  }
  CHECK(worst < 1e-5);

  for (bool accumulate : {false, true}) {
    CAPTURE(accumulate);
    Bits dwb = to_bits(rnd(D, 24, -0.5, 0.5));
    const Vec dw0 = values(dwb);
    std::fill(dxf.begin(), dxf.end(), 0.f);
    be.rmsnorm_bwd(tf(dxf, {N, D}), tb(dwb, {D}), tf(dyf, {N, D}), tf(xf, {N, D}), tb(wb, {D}), tf(rs, {N}),
                   accumulate);
    RneCheck chk;
    for (int64_t k = 0; k < D; ++k) {
      double s = 0, mag = 0;
      for (int64_t n = 0; n < N; ++n) {
        const double term = double(dyf[n * D + k]) * xf[n * D + k] * double(rs[n]);
        s += term;
        mag += std::fabs(term);
      }
      const double want = (accumulate ? dw0[k] : 0.0) + s;
      chk.add(value_of(dwb[k]), want, 1e-6 * (mag + std::fabs(dw0[k])), "dw", size_t(k));
    }
    chk.require("rmsnorm dw bf16");
    double dx_worst = 0;  // dx (f32) still as the formula with bf16 w's values
    for (int64_t n = 0; n < N; ++n) {
      double dot = 0;
      for (int64_t j = 0; j < D; ++j) dot += double(dyf[n * D + j]) * w[j] * xf[n * D + j];
      const double rr = rs[n];
      for (int64_t k = 0; k < D; ++k) {
        const double want = rr * w[k] * dyf[n * D + k] - xf[n * D + k] * rr * rr * rr / double(D) * dot;
        dx_worst = std::max(dx_worst, std::fabs(dxf[n * D + k] - want));
      }
    }
    CHECK(dx_worst < 1e-5);
  }
}

TEST_CASE("bf16 embedding on the cpu: bf16 table read into f32, repeated tokens summed once into bf16 dtable",
          "[bf16][embedding]") {
  CpuBackend be;
  const int64_t V = 11, D = 24, N = 60;
  std::vector<int32_t> tok(N);
  std::mt19937_64 gen(31);
  for (auto& t : tok) t = int32_t(gen() % 5) * 2;  // tokens 0, 2, ..., 8, each ~12 times; odd rows never touched
  Tensor tt(tok.data(), DType::i32, Device::cpu, {N});
  Bits table = to_bits(rnd(V * D, 32));
  std::vector<float> out(N * D);
  be.embedding_fwd(tf(out, {N, D}), tt, tb(table, {V, D}));
  bool same = true;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) same = same && double(out[n * D + d]) == value_of(table[tok[n] * D + d]);
  CHECK(same);

  // dout small against the table's entries: rounding per row would lose most of it (each row adds less than half a
  // bf16 step), one rounding of the sum keeps it
  const Vec dout = rnd(N * D, 33, -1e-3, 1e-3);
  std::vector<float> df = to_float(dout);
  Bits dt = to_bits(rnd(V * D, 34, 0.5, 1.0));
  const Bits dt0 = dt;
  be.embedding_bwd(tb(dt, {V, D}), tt, tf(df, {N, D}));
  RneCheck chk;
  for (int64_t v = 0; v < V; ++v)
    for (int64_t d = 0; d < D; ++d) {
      double s = 0, mag = value_of(dt0[v * D + d]);
      bool touched = false;
      for (int64_t n = 0; n < N; ++n)
        if (tok[n] == v) {
          s += double(df[n * D + d]);
          mag += std::fabs(double(df[n * D + d]));
          touched = true;
        }
      if (!touched) {
        CHECK(dt[v * D + d] == dt0[v * D + d]);
        continue;
      }
      chk.add(value_of(dt[v * D + d]), value_of(dt0[v * D + d]) + s, 1e-6 * mag, "dtable", size_t(v * D + d));
    }
  chk.require("embedding dtable bf16");
  CHECK(dt != dt0);
}

TEST_CASE("bf16 elementwise ops and reductions on the cpu: fill, cast, add_inplace, scale, sum, sum_squares",
          "[bf16]") {
  CpuBackend be;
  // cast f32 -> bf16: ordinary values, ties (to even), signed zero, overflow, infinities, NaN, a subnormal
  std::vector<float> special = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -1.0f - 1.0f / 256, -0.0f,
                                3.4e38f, -3.39e38f, INFINITY, -INFINITY, 1e-40f, 0.1f, -123.456f};
  const Vec r = rnd(1000, 41, -100, 100);
  for (double x : r) special.push_back(float(x));
  const int64_t n = int64_t(special.size());
  Bits b(size_t(n), 0);
  be.cast(tb(b, {n}), tf(special, {n}));
  for (int64_t i = 0; i < n; ++i) {
    CAPTURE(i, special[i]);
    const double want = rne(double(special[i]));
    CHECK(value_of(b[i]) == want);
    CHECK(std::signbit(value_of(b[i])) == std::signbit(special[i]));
  }
  std::vector<float> nan1 = {NAN};
  Bits bn(1);
  be.cast(tb(bn, {1}), tf(nan1, {1}));
  CHECK(std::isnan(value_of(bn[0])));
  std::vector<float> back(static_cast<size_t>(n));
  be.cast(tf(back, {n}), tb(b, {n}));  // bf16 -> f32 is exact
  for (int64_t i = 0; i < n; ++i) CHECK(double(back[i]) == value_of(b[i]));

  Bits f(9);
  be.fill(tb(f, {9}), 0.1f);
  CHECK(std::all_of(f.begin(), f.end(), [](uint16_t x) { return value_of(x) == rne(double(0.1f)); }));

  const int64_t m = 777;
  const Vec xv = values(to_bits(rnd(m, 42))), yv = rnd(m, 43);
  const Vec yq = values(to_bits(yv));
  {  // bf16 += bf16, bf16 += f32: one rounding of the fp32 sum
    for (int yb = 0; yb < 2; ++yb) {
      Bits x = to_bits(xv), y = to_bits(yv);
      std::vector<float> y32 = to_float(yv);
      be.add_inplace(tb(x, {m}), yb ? tb(y, {m}) : tf(y32, {m}));
      RneCheck chk;
      for (int64_t i = 0; i < m; ++i) {
        const double s = xv[i] + (yb ? yq[i] : double(y32[i]));
        chk.add(value_of(x[i]), s, std::ldexp(std::fabs(s), -23), "x", size_t(i));
      }
      chk.require(yb ? "add bf16 += bf16" : "add bf16 += f32");
    }
    std::vector<float> x32 = to_float(yv);  // f32 += bf16
    Bits xb = to_bits(xv);
    be.add_inplace(tf(x32, {m}), tb(xb, {m}));
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      worst = std::max(worst, std::fabs(x32[i] - (double(float(yv[i])) + xv[i])) / (std::fabs(yv[i] + xv[i]) + 1e-30));
    CHECK(worst <= std::ldexp(1.0, -24));
  }
  {  // scale
    Bits x = to_bits(xv);
    be.scale(tb(x, {m}), 0.37f);
    RneCheck chk;
    for (int64_t i = 0; i < m; ++i) {
      const double s = xv[i] * double(0.37f);
      chk.add(value_of(x[i]), s, std::ldexp(std::fabs(s), -23), "x", size_t(i));
    }
    chk.require("scale bf16");
  }
  {  // sum and sum of squares of the bf16 values, in double
    Bits x = to_bits(xv);
    double s = 0, s2 = 0;
    for (double v : xv) s += v, s2 += v * v;
    CHECK(be.sum(tb(x, {m})) == Approx(s).epsilon(1e-12));
    CHECK(be.sum_squares(tb(x, {m})) == Approx(s2).epsilon(1e-12));
  }
}
