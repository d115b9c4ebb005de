// The CUDA backend against the CPU reference backend (ggml tests/test-backend-ops.cpp: "asserts that the results of
// multiple backends computing the same ops are consistent"). Every op of Backend, on shapes that include odd sizes
// (d 16..4096, sequence lengths 1, 7, 100, 513), fresh random inputs on every run (the seed is printed on failure),
// outputs poisoned with NaN before each run so that an element the GPU does not write fails.
//
// Tolerance: |got - ref| <= rtol * (|ref| + rms(ref)) elementwise, rtol 1e-5 for fp32 outputs and 2e-2 for bf16.
// The absolute part, atol = rtol * rms(ref), is there because entries near zero come from the cancellation of terms
// of the tensor's typical size (a dot product, a softmax gradient p - onehot, a sum over rows), and their rounding
// error is relative to that size, not to the entry. Matrix products are judged norm-wise, ‖got - ref‖ / ‖ref‖.
// bf16 inputs are rounded to bf16 on the host first and the CPU gets the same rounded values in fp32, so only the
// GPU's bf16 intermediates and outputs are measured. The largest normalised error of each check is printed at the end.
//
// Tagged [cuda]; every case returns with a warning when no GPU is visible (Catch2 2.13 has no SKIP).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "device_tensor.h"
#include "test_helpers.h"

namespace {

using namespace trainer;
using namespace trainer::testing;

/// NaN into every element of a GPU output before the op runs.
void poison(const Tensor& t) { gpu().fill(t, std::numeric_limits<float>::quiet_NaN()); }

// ---- random inputs --------------------------------------------------------------------------------------------------

/// A fresh seed per run (the inputs differ every time), printed by CAPTURE on failure.
uint64_t fresh_seed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

struct Rng {
  std::mt19937_64 g;
  explicit Rng(uint64_t seed) : g(seed) {}
  Vec uniform(int64_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
  }
  std::vector<int32_t> ints(int64_t n, int32_t lo, int32_t hi) {  // [lo, hi)
    std::uniform_int_distribution<int32_t> d(lo, hi - 1);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(g);
    return v;
  }
  int pick(std::initializer_list<int> xs) {
    std::uniform_int_distribution<size_t> d(0, xs.size() - 1);
    return *(xs.begin() + d(g));
  }
};

// ---- comparisons ----------------------------------------------------------------------------------------------------

double rtol_for(DType t) { return t == DType::bf16 ? 2e-2 : 1e-5; }

/// The largest normalised error seen per check name, printed by the last test case.
std::map<std::string, std::pair<double, double>>& error_table() {  // name -> (max error, tolerance)
  static std::map<std::string, std::pair<double, double>> t;
  return t;
}
void note(const std::string& name, double err, double tol) {
  auto& e = error_table()[name];
  e.first = std::max(e.first, err);
  e.second = tol;
}

double rms(const Vec& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return v.empty() ? 0.0 : std::sqrt(s / double(v.size()));
}

/// |got - ref| <= rtol (|ref| + rms(ref)) for every element; NaN fails.
void check_close(const std::string& name, const Vec& got, const Vec& ref, double rtol) {
  REQUIRE(got.size() == ref.size());
  const double r = rms(ref), atol = rtol * r;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - double(ref[i])) / (std::fabs(double(ref[i])) + r + 1e-30);
    worst = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(worst, e);
  }
  note(name, worst, rtol);
  const std::string report = testing::all_close(got, ref, atol, rtol);
  INFO(name << ": max |got-ref|/(|ref|+rms) = " << worst << ", rtol " << rtol);
  CHECK(report == "");
}

/// ‖got - ref‖₂ / ‖ref‖₂ <= tol, and no NaN.
void check_normwise(const std::string& name, const Vec& got, const Vec& ref, double tol) {
  REQUIRE(got.size() == ref.size());
  double num = 0, den = 0;
  size_t nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) ++nan;
    num += (double(got[i]) - double(ref[i])) * (double(got[i]) - double(ref[i]));
    den += double(ref[i]) * double(ref[i]);
  }
  const double err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  note(name, nan ? std::numeric_limits<double>::infinity() : err, tol);
  INFO(name << ": normwise error " << err << " (tol " << tol << "), NaNs " << nan);
  CHECK(nan == 0);
  CHECK(err <= tol);
}

/// Exact equality (ops whose result is one rounding of the same value on both sides).
void check_equal(const std::string& name, const Vec& got, const Vec& ref) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == ref[i]) && !(std::isnan(got[i]) && std::isnan(ref[i]))) {
      if (!bad) first = i;
      ++bad;
    }
  note(name, bad ? 1.0 : 0.0, 0.0);
  INFO(name << ": " << bad << " of " << got.size() << " differ; first at " << first << ": got "
            << (bad ? got[first] : 0.f) << " ref " << (bad ? ref[first] : 0.f));
  CHECK(bad == 0);
}

const char* dn(DType t) { return dtype_name(t); }

// =====================================================================================================================

TEST_CASE("cuda backend: description, events, out of memory", "[cuda]") {
  REQUIRE_GPU();
  const std::string d = gpu().description();
  INFO(d);
  CHECK(d.find("GiB") != std::string::npos);
  CHECK(d.find("CUDA") != std::string::npos);
  CHECK(gpu().name() == "cuda:0");
  CHECK(gpu().stream() != nullptr);

  auto e0 = gpu().make_event(), e1 = gpu().make_event();
  Dev x = make(gpu(), DType::f32, {1 << 20});
  gpu().record(*e0);
  gpu().fill(x.t, 1.f);
  gpu().record(*e1);
  const float ms = gpu().elapsed_ms(*e0, *e1);
  CHECK(ms >= 0.f);
  CHECK(ms < 1000.f);

  // An impossible request fails as OutOfMemory (nullptr from raw_alloc), and the backend keeps working.
  const size_t before = gpu().memory().total;
  CHECK_THROWS_AS(gpu().alloc(size_t(1) << 50, Category::activations), OutOfMemory);
  CHECK(gpu().memory().total == before);
  gpu().fill(x.t, 2.f);
  CHECK(gpu().sum(x.t) == double(1 << 20) * 2.0);
}

TEST_CASE("cuda caching allocator: freed blocks are reused, reserved bytes, flush on out of memory", "[cuda][memory]") {
  REQUIRE_GPU();
  constexpr size_t MiB = size_t(1) << 20;
  auto be = make_backend(Device::cuda, 0);  // a fresh one: its cache holds nothing yet
  const size_t r0 = be->reserved_bytes();   // the backend's own buffers (cuBLASLt workspace, partial sums)
  CHECK(r0 >= be->memory().total);
  CHECK(be->peak_reserved_bytes() == r0);
  void* a = be->raw_alloc(3 * MiB + 100);  // reserves 4 MiB
  REQUIRE(a);
  CHECK(be->reserved_bytes() == r0 + 4 * MiB);
  be->raw_free(a);
  CHECK(be->reserved_bytes() == r0 + 4 * MiB);  // cached, not returned
  void* b = be->raw_alloc(4 * MiB);
  CHECK(b == a);  // the same block again
  void* c = be->raw_alloc(4 * MiB);
  CHECK(c != b);
  CHECK(be->reserved_bytes() == r0 + 8 * MiB);
  be->raw_free(b);
  be->raw_free(c);

  // Through Buffer, with data: a block reused in stream order holds what the later op wrote.
  {
    Buffer x = be->alloc(4 * MiB, Category::activations);
    CHECK((x.data() == a || x.data() == c));
    be->fill(x.view(DType::f32, {int64_t(MiB)}), 3.f);
    CHECK(be->sum(x.view(DType::f32, {int64_t(MiB)})) == 3.0 * double(MiB));
  }
  {
    Buffer y = be->alloc(4 * MiB, Category::activations);  // reused without a sync: the fill below runs after
    be->fill(y.view(DType::f32, {int64_t(MiB)}), -1.f);     // the sum above in stream order
    CHECK(be->sum(y.view(DType::f32, {int64_t(MiB)})) == -double(MiB));
  }
  CHECK(be->reserved_bytes() == r0 + 8 * MiB);
  CHECK(be->peak_reserved_bytes() == r0 + 8 * MiB);

  // An impossible request: the cache is emptied (both 4 MiB blocks go back), the retry fails, OutOfMemory.
  CHECK_THROWS_AS(be->alloc(size_t(1) << 50, Category::activations), OutOfMemory);
  CHECK(be->reserved_bytes() == r0);
  CHECK(be->peak_reserved_bytes() == r0 + 8 * MiB);
  void* d = be->raw_alloc(4 * MiB);
  REQUIRE(d);
  CHECK(be->reserved_bytes() == r0 + 4 * MiB);
  be->raw_free(d);
  // The CPU backend has no cache.
  CHECK(cpu().reserved_bytes() == 0);
}

TEST_CASE("cuda matmul matches cpu (f32 strict, bf16 -> bf16, bf16 -> f32; all transposes; beta 0 and 1)",
          "[cuda][matmul]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  struct Dims {
    int M, N, K;
  };
  const Dims dims[] = {{1, 1, 1}, {7, 16, 17}, {100, 33, 64}, {513, 768, 100}, {64, 4096, 16}, {16, 100, 4096},
                       {513, 513, 513}, {3, 5, 7}};
  struct Types {
    DType ab, c;
  };
  const Types types[] = {{DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}};
  for (const Dims& dm : dims)
    for (const Types& ty : types)
      for (int ta = 0; ta < 2; ++ta)
        for (int tb = 0; tb < 2; ++tb)
          for (float beta : {0.f, 1.f}) {
            const int M = dm.M, N = dm.N, K = dm.K;
            CAPTURE(M, N, K, dn(ty.ab), dn(ty.c), ta, tb, beta);
            const float alpha = rng.uniform(1, 0.5f, 2.f)[0];
            const Vec a = as_dtype(rng.uniform(int64_t(M) * K), ty.ab);
            const Vec b = as_dtype(rng.uniform(int64_t(K) * N), ty.ab);
            const Vec c0 = as_dtype(rng.uniform(int64_t(M) * N), ty.c);
            Dev ga = ta ? make_from(gpu(), ty.ab, {K, M}, a) : make_from(gpu(), ty.ab, {M, K}, a);
            Dev gb = tb ? make_from(gpu(), ty.ab, {N, K}, b) : make_from(gpu(), ty.ab, {K, N}, b);
            Dev gc = make(gpu(), ty.c, {M, N});
            if (beta == 0.f)
              poison(gc.t);
            else
              upload(gpu(), gc.t, c0);
            gpu().matmul(gc.t, ga.t, ta, gb.t, tb, alpha, beta);
            Dev ca = ta ? make_from(cpu(), DType::f32, {K, M}, a) : make_from(cpu(), DType::f32, {M, K}, a);
            Dev cb = tb ? make_from(cpu(), DType::f32, {N, K}, b) : make_from(cpu(), DType::f32, {K, N}, b);
            Dev cc = make_from(cpu(), DType::f32, {M, N}, c0);
            cpu().matmul(cc.t, ca.t, ta, cb.t, tb, alpha, beta);
            // bf16 -> f32 is held to the fp32 tolerance: bf16 products are exact in fp32 and the sums are fp32.
            check_normwise(std::string("matmul ") + dn(ty.ab) + "->" + dn(ty.c), download(gpu(), gc.t),
                           download(cpu(), cc.t), rtol_for(ty.c));
          }
}

TEST_CASE("cuda matmul on operands that are not 16-byte aligned", "[cuda][matmul]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  const int M = 37, N = 29, K = 41;
  const Vec a = rng.uniform(M * K), b = rng.uniform(K * N);
  // Views one element into larger buffers: 4-byte aligned only.
  Dev ba = make(gpu(), DType::f32, {M * K + 1}), bb = make(gpu(), DType::f32, {K * N + 1}),
      bc = make(gpu(), DType::f32, {M * N + 1});
  Tensor ga = ba.t.slice(1, {M, K}), gb = bb.t.slice(1, {K, N}), gc = bc.t.slice(1, {M, N});
  upload(gpu(), ga, a);
  upload(gpu(), gb, b);
  poison(gc);
  gpu().matmul(gc, ga, false, gb, false, 1.f, 0.f);
  Dev ca = make_from(cpu(), DType::f32, {M, K}, a), cb = make_from(cpu(), DType::f32, {K, N}, b),
      cc = make(cpu(), DType::f32, {M, N});
  cpu().matmul(cc.t, ca.t, false, cb.t, false, 1.f, 0.f);
  check_normwise("matmul f32 unaligned", download(gpu(), gc), download(cpu(), cc.t), 1e-5);
}

TEST_CASE("cuda matmul_add (residual in the epilogue) and autotuned matmul match cpu", "[cuda][matmul]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  BackendOptions opts;
  opts.gemm_autotune = true;
  auto tuned = make_backend(Device::cuda, 0, opts);
  struct Dims {
    int M, N, K;
  };
  const Dims dims[] = {{7, 16, 17}, {513, 768, 100}, {2048, 768, 768}, {100, 2304, 768}};
  for (const Dims& dm : dims)
    for (DType t : {DType::f32, DType::bf16})
      for (Backend* be : {&gpu(), tuned.get()}) {
        const int M = dm.M, N = dm.N, K = dm.K;
        const bool autotuned = be != &gpu();
        CAPTURE(M, N, K, dn(t), autotuned);
        const Vec a = as_dtype(rng.uniform(int64_t(M) * K), t), b = as_dtype(rng.uniform(int64_t(N) * K), t);
        const Vec r = as_dtype(rng.uniform(int64_t(M) * N), t);
        Dev ga = make_from(*be, t, {M, K}, a), gb = make_from(*be, t, {N, K}, b), gr = make_from(*be, t, {M, N}, r);
        Dev gd = make(*be, t, {M, N}), gc = make(*be, t, {M, N});
        be->fill(gd.t, std::numeric_limits<float>::quiet_NaN());
        be->fill(gc.t, std::numeric_limits<float>::quiet_NaN());
        be->matmul_add(gd.t, ga.t, false, gb.t, true, gr.t);  // D = A Bᵀ + R
        be->matmul(gc.t, ga.t, false, gb.t, true, 1.f, 0.f);  // C = A Bᵀ
        Dev ca = make_from(cpu(), DType::f32, {M, K}, a), cb = make_from(cpu(), DType::f32, {N, K}, b);
        Dev cr = make_from(cpu(), DType::f32, {M, N}, r), cd = make(cpu(), DType::f32, {M, N}),
            cc = make(cpu(), DType::f32, {M, N});
        cpu().matmul_add(cd.t, ca.t, false, cb.t, true, cr.t);
        cpu().matmul(cc.t, ca.t, false, cb.t, true, 1.f, 0.f);
        check_normwise(std::string("matmul_add ") + dn(t), download(*be, gd.t), download(cpu(), cd.t), rtol_for(t));
        check_normwise(std::string(autotuned ? "matmul autotuned " : "matmul ") + dn(t), download(*be, gc.t),
                       download(cpu(), cc.t), rtol_for(t));
        CHECK(download(*be, gr.t) == r);  // the residual input is left as it was
      }
  // Every shape of the tuned backend was timed once (shape x dtype; matmul_add shares matmul's plan).
  const GemmTuning tu = tuned->gemm_tuning();
  CHECK(tu.shapes >= 1);
  CHECK(tu.shapes <= int(std::size(dims)) * 2);
  CHECK(tu.tuned_ms <= tu.heuristic_ms);
  CHECK(gpu().gemm_tuning().shapes == 0);
  CHECK_THROWS_AS(gpu().matmul_add(make(gpu(), DType::f32, {4, 4}).t, make(gpu(), DType::f32, {4, 4}).t, false,
                                   make(gpu(), DType::f32, {4, 4}).t, false, make(gpu(), DType::f32, {4, 5}).t),
                  RuntimeError);
}

TEST_CASE("cuda fp32_matmul: 3xtf32 keeps fp32's error, tf32 has TF32's", "[cuda][matmul]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  std::unique_ptr<Backend> be[3];
  const Fp32Matmul modes[3] = {Fp32Matmul::ieee, Fp32Matmul::tf32, Fp32Matmul::split3};
  const char* names[3] = {"ieee", "tf32", "3xtf32"};
  for (int i = 0; i < 3; ++i) {
    BackendOptions opts;
    opts.fp32_matmul = modes[i];
    be[i] = make_backend(Device::cuda, 0, opts);
  }
  struct Case {
    int M, N, K;
    bool ta, tb, residual;
  };
  const Case cases[] = {{256, 384, 4096, false, true, false}, {100, 257, 1000, true, false, true},
                        {7, 16, 17, false, false, false}, {513, 768, 768, true, true, true}};
  for (const Case& c : cases) {
    CAPTURE(c.M, c.N, c.K, c.ta, c.tb, c.residual);
    const Vec a = rng.uniform(int64_t(c.M) * c.K, -1.f, 1.f), b = rng.uniform(int64_t(c.K) * c.N, -1.f, 1.f),
              r = rng.uniform(int64_t(c.M) * c.N, -1.f, 1.f);
    // fp64 reference of op(A) op(B) (+ R); A stored [M, K] or [K, M], B [K, N] or [N, K]
    std::vector<double> ref(size_t(c.M) * c.N);
    for (int i = 0; i < c.M; ++i)
      for (int j = 0; j < c.N; ++j) {
        double acc = c.residual ? double(r[size_t(i) * c.N + j]) : 0.0;
        for (int k = 0; k < c.K; ++k) {
          const double x = a[c.ta ? size_t(k) * c.M + i : size_t(i) * c.K + k];
          const double y = b[c.tb ? size_t(j) * c.K + k : size_t(k) * c.N + j];
          acc += x * y;
        }
        ref[size_t(i) * c.N + j] = acc;
      }
    double err[3];
    for (int m = 0; m < 3; ++m) {
      Backend& g = *be[m];
      Dev ga = c.ta ? make_from(g, DType::f32, {c.K, c.M}, a) : make_from(g, DType::f32, {c.M, c.K}, a);
      Dev gb = c.tb ? make_from(g, DType::f32, {c.N, c.K}, b) : make_from(g, DType::f32, {c.K, c.N}, b);
      Dev gr = make_from(g, DType::f32, {c.M, c.N}, r), gc = make(g, DType::f32, {c.M, c.N});
      g.fill(gc.t, std::numeric_limits<float>::quiet_NaN());
      if (c.residual) g.matmul_add(gc.t, ga.t, c.ta, gb.t, c.tb, gr.t);
      else g.matmul(gc.t, ga.t, c.ta, gb.t, c.tb, 1.f, 0.f);
      const Vec got = download(g, gc.t);
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
        den += ref[i] * ref[i];
      }
      err[m] = std::isnan(num) ? std::numeric_limits<double>::infinity() : std::sqrt(num / den);
      note(std::string("fp32_matmul ") + names[m] + " vs fp64 (normwise)", err[m], m == 1 ? 2e-3 : 2e-6);
      if (c.residual) CHECK(download(g, gr.t) == r);  // the residual input is left as it was
    }
    INFO("normwise error vs fp64: ieee " << err[0] << ", tf32 " << err[1] << ", 3xtf32 " << err[2]);
    CHECK(err[0] <= 2e-6);
    CHECK(err[2] <= 2e-6);        // fp32's order (IEEE: ~1e-7; 3xTF32 drops terms of ~2^-21 relative)
    CHECK(err[1] <= 2e-3);        // one TF32 product: ~2^-11 per operand
    if (c.K >= 100) CHECK(err[1] > 20 * err[2]);  // the split products are not plain TF32 ones
  }
}

TEST_CASE("cuda embedding_fwd / embedding_bwd match cpu", "[cuda][embedding]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int N : {1, 7, 100, 513})
    for (int D : {16, 17, 768, 4096})
      for (DType dt : {DType::f32, DType::bf16}) {
        const int V = rng.pick({5, 64, 1000});  // V = 5 makes most tokens repeat (the backward's sums)
        CAPTURE(N, D, V, dn(dt));
        const auto tokens = rng.ints(N, 0, V);
        const Vec table = as_dtype(rng.uniform(int64_t(V) * D), dt);
        Dev gt = make_i32(gpu(), tokens), ct = make_i32(cpu(), tokens);
        // forward: a gather, so exact; table and out in dt (and a bf16 table into an f32 out).
        Dev gtab = make_from(gpu(), dt, {V, D}, table), gout = make(gpu(), dt, {N, D});
        poison(gout.t);
        gpu().embedding_fwd(gout.t, gt.t, gtab.t);
        Dev ctab = make_from(cpu(), DType::f32, {V, D}, table), cout = make(cpu(), DType::f32, {N, D});
        cpu().embedding_fwd(cout.t, ct.t, ctab.t);
        check_equal(std::string("embedding_fwd ") + dn(dt), download(gpu(), gout.t), download(cpu(), cout.t));
        if (dt == DType::bf16) {
          Dev gout32 = make(gpu(), DType::f32, {N, D});
          poison(gout32.t);
          gpu().embedding_fwd(gout32.t, gt.t, gtab.t);
          check_equal("embedding_fwd bf16->f32", download(gpu(), gout32.t), download(cpu(), cout.t));
        }
        // backward: dtable (f32) accumulates dout (dt) rows.
        const Vec dtab0 = rng.uniform(int64_t(V) * D), dout = as_dtype(rng.uniform(int64_t(N) * D), dt);
        Dev gdt = make_from(gpu(), DType::f32, {V, D}, dtab0), gdo = make_from(gpu(), dt, {N, D}, dout);
        gpu().embedding_bwd(gdt.t, gt.t, gdo.t);
        Dev cdt = make_from(cpu(), DType::f32, {V, D}, dtab0), cdo = make_from(cpu(), DType::f32, {N, D}, dout);
        cpu().embedding_bwd(cdt.t, ct.t, cdo.t);
        check_close("embedding_bwd", download(gpu(), gdt.t), download(cpu(), cdt.t), 1e-5);
      }
}

TEST_CASE("cuda embedding_bwd is deterministic", "[cuda][embedding]") {
  REQUIRE_GPU();
  Rng rng(fresh_seed());
  const int N = 4096, D = 256, V = 7;  // ~600 repeats of each token
  const auto tokens = rng.ints(N, 0, V);
  Dev gt = make_i32(gpu(), tokens), gdo = make_from(gpu(), DType::f32, {N, D}, rng.uniform(int64_t(N) * D));
  Vec first;
  for (int rep = 0; rep < 3; ++rep) {
    Dev gdt = make(gpu(), DType::f32, {V, D});
    gpu().fill(gdt.t, 0.f);
    gpu().embedding_bwd(gdt.t, gt.t, gdo.t);
    const Vec got = download(gpu(), gdt.t);
    if (rep == 0)
      first = got;
    else
      CHECK(std::memcmp(first.data(), got.data(), got.size() * 4) == 0);
  }
}

TEST_CASE("cuda rmsnorm_fwd / rmsnorm_bwd match cpu", "[cuda][rmsnorm]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  const float eps = 1e-5f;
  // N: the backward's blocks of 2 rows (cuda_sizes::rmsnorm_bwd_rows) with a last block of one row; 2051 rows: 4 a
  // block, the last 3; 9001 rows: 10 a block, the last 1
  for (int N : {1, 7, 100, 513, 2051, 9001})
    for (int D : {16, 17, 100, 768, 4096, 16384})  // 16384: the backward's 64 KiB shared-memory opt-in
      for (DType dt : {DType::f32, DType::bf16})
        for (DType wt : {DType::f32, DType::bf16}) {
          if (dt == DType::f32 && wt == DType::bf16) continue;
          if (N > 1000 && D != 768) continue;
          CAPTURE(N, D, dn(dt), dn(wt));
          const Vec x = as_dtype(rng.uniform(int64_t(N) * D, -2.f, 2.f), dt);
          const Vec w = as_dtype(rng.uniform(D, 0.5f, 1.5f), wt);
          Dev gx = make_from(gpu(), dt, {N, D}, x), gw = make_from(gpu(), wt, {D}, w);
          Dev gy = make(gpu(), dt, {N, D}), gr = make(gpu(), DType::f32, {N});
          poison(gy.t);
          poison(gr.t);
          gpu().rmsnorm_fwd(gy.t, gr.t, gx.t, gw.t, eps);
          Dev cx = make_from(cpu(), DType::f32, {N, D}, x), cw = make_from(cpu(), DType::f32, {D}, w);
          Dev cy = make(cpu(), DType::f32, {N, D}), cr = make(cpu(), DType::f32, {N});
          cpu().rmsnorm_fwd(cy.t, cr.t, cx.t, cw.t, eps);
          const std::string tag = std::string(dn(dt)) + "/w " + dn(wt);
          check_close("rmsnorm_fwd y " + tag, download(gpu(), gy.t), download(cpu(), cy.t), rtol_for(dt));
          check_close("rmsnorm_fwd rstd " + tag, download(gpu(), gr.t), download(cpu(), cr.t), 1e-5);

          // backward accumulates into dx (dt) and dw (f32); the CPU gets the GPU's rstd so both use the same one.
          const Vec dy = as_dtype(rng.uniform(int64_t(N) * D), dt), dx0 = as_dtype(rng.uniform(int64_t(N) * D), dt);
          const Vec dw0 = rng.uniform(D), rstd = download(gpu(), gr.t);
          Dev gdy = make_from(gpu(), dt, {N, D}, dy), gdx = make_from(gpu(), dt, {N, D}, dx0),
              gdw = make_from(gpu(), DType::f32, {D}, dw0);
          gpu().rmsnorm_bwd(gdx.t, gdw.t, gdy.t, gx.t, gw.t, gr.t);
          Dev cdy = make_from(cpu(), DType::f32, {N, D}, dy), cdx = make_from(cpu(), DType::f32, {N, D}, dx0),
              cdw = make_from(cpu(), DType::f32, {D}, dw0), cr2 = make_from(cpu(), DType::f32, {N}, rstd);
          cpu().rmsnorm_bwd(cdx.t, cdw.t, cdy.t, cx.t, cw.t, cr2.t);
          check_close("rmsnorm_bwd dx " + tag, download(gpu(), gdx.t), download(cpu(), cdx.t), rtol_for(dt));
          check_close("rmsnorm_bwd dw " + tag, download(gpu(), gdw.t), download(cpu(), cdw.t), 1e-5);
          // accumulate_dw = false overwrites dw (poisoned first: every element must be written).
          poison(gdw.t);
          gpu().rmsnorm_bwd(gdx.t, gdw.t, gdy.t, gx.t, gw.t, gr.t, /*accumulate_dw=*/false);
          cpu().rmsnorm_bwd(cdx.t, cdw.t, cdy.t, cx.t, cw.t, cr2.t, /*accumulate_dw=*/false);
          check_close("rmsnorm_bwd dw (overwrite) " + tag, download(gpu(), gdw.t), download(cpu(), cdw.t), 1e-5);
        }
}

TEST_CASE("cuda rope matches cpu, and inverse undoes it", "[cuda][rope]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int T : {1, 7, 100, 513})
    for (int dh : {2, 16, 64, 128})
      for (DType dt : {DType::f32, DType::bf16})
        for (int inverse = 0; inverse < 2; ++inverse) {
          AttnShape s;
          s.B = rng.pick({1, 2}), s.T = T, s.H = rng.pick({1, 3}), s.d_head = dh;
          CAPTURE(s.B, T, s.H, dh, dn(dt), inverse);
          const int64_t rows = int64_t(s.B) * T, D = int64_t(s.H) * dh;
          const Vec qkv = as_dtype(rng.uniform(rows * 3 * D), dt);
          Dev g = make_from(gpu(), dt, {rows, 3 * D}, qkv), c = make_from(cpu(), DType::f32, {rows, 3 * D}, qkv);
          gpu().rope(g.t, s, 10000.f, inverse);
          cpu().rope(c.t, s, 10000.f, inverse);
          check_close(std::string("rope ") + dn(dt), download(gpu(), g.t), download(cpu(), c.t), rtol_for(dt));
          if (dt == DType::f32) {  // R(-a) R(a) = I: back to the input up to rounding
            gpu().rope(g.t, s, 10000.f, !inverse);
            check_close("rope round trip f32", download(gpu(), g.t), qkv, 1e-5);
          }
        }
}

/// Columns c0 .. c0+n-1 of a row-major matrix with `cols` columns.
Vec columns(const Vec& m, int64_t cols, int64_t c0, int64_t n) {
  Vec out;
  for (size_t r = 0; r < m.size() / size_t(cols); ++r)
    out.insert(out.end(), m.begin() + int64_t(r) * cols + c0, m.begin() + int64_t(r) * cols + c0 + n);
  return out;
}

/// Runs attention forward and backward on both backends and compares every output.
void attention_case(Rng& rng, AttnImpl impl, DType dt, DType dqkv_t, int B, int T, int H, int dh, bool causal) {
  CAPTURE(impl == AttnImpl::naive ? "naive" : "flash2", dn(dt), dn(dqkv_t), B, T, H, dh, causal);
  AttnShape s;
  s.B = B, s.T = T, s.H = H, s.d_head = dh, s.causal = causal, s.scale = 1.f / std::sqrt(float(dh));
  const int64_t N = int64_t(B) * T, D = int64_t(H) * dh;
  const Vec qkv = as_dtype(rng.uniform(N * 3 * D, -2.f, 2.f), dt), dout = as_dtype(rng.uniform(N * D), dt);
  const bool naive = impl == AttnImpl::naive;
  const double rt = rtol_for(dt);
  const std::string tag = std::string(naive ? "naive " : "flash2 ") + dn(dt);

  Dev gq = make_from(gpu(), dt, {N, 3 * D}, qkv), go = make(gpu(), dt, {N, D}), gl = make(gpu(), DType::f32, {B, H, T});
  Dev gp = naive ? make(gpu(), dt, {B, H, T, T}) : Dev{};
  poison(go.t);
  poison(gl.t);
  if (naive) poison(gp.t);
  gpu().attention_fwd(impl, s, go.t, gl.t, gp.t, gq.t);
  Dev cq = make_from(cpu(), DType::f32, {N, 3 * D}, qkv), co = make(cpu(), DType::f32, {N, D}),
      cl = make(cpu(), DType::f32, {B, H, T});
  Dev cp = naive ? make(cpu(), DType::f32, {B, H, T, T}) : Dev{};
  cpu().attention_fwd(impl, s, co.t, cl.t, cp.t, cq.t);
  // bf16: the GPU rounds P (and, in the backward, dS = P o (dP - D)) to bf16 before the products with V, K and Q, as
  // PyTorch's bf16 matmuls and FlashAttention-2 do. An fp64 emulation of exactly those roundings against the fp32
  // reference (T 100 and 513, d_head 64, causal, inputs as here) gave normwise errors 2e-3..3.4e-3 and elementwise
  // max |got-ref|/(|ref|+rms) up to 2.8e-2 (dk); on the H200 the normwise errors were 1.6e-3..4.1e-3 and the
  // elementwise tails reached 1.2e-2 (forward) and 4.2e-2 (dk, flash2 path, whose CPU reference keeps P in fp32).
  // So bf16 attention is held to the normwise 2e-2 of matmul, which carries the accuracy claim, plus an elementwise
  // guard against gross errors: 5e-2 forward, 1e-1 backward (the tails of a sum of bf16 roundings, about twice the
  // worst seen; flash-attention's tests likewise allow 2x the error of a reference in the same precision).
  // f32 flash2 runs its products as 3xTF32 on the tensor cores (each fp32 product from three TF32 products; the
  // dropped lo·lo term is ~2^-22 relative) with ex2.approx exponentials: its elementwise errors on the H200 were
  // 5.3e-6 .. 1.34e-5 of |ref| + rms (out, dq, dk, dv; five runs, fresh seeds), around the 1e-5 used for exact fp32
  // arithmetic, so it is held to 5e-5 (about 4x the worst seen; the FlashAttention issue's fp32 bound is 1e-4). The
  // naive path (cuBLAS fp32 GEMMs, exact exponentials) keeps 1e-5.
  const double rt_f32 = naive ? rt : 5e-5;
  auto check_attn = [&](const std::string& name, const Vec& got, const Vec& ref, double elementwise_bf16) {
    if (dt == DType::bf16) {
      check_normwise(name + " (normwise)", got, ref, 2e-2);
      check_close(name, got, ref, elementwise_bf16);
    } else {
      check_close(name, got, ref, rt_f32);
    }
  };
  check_attn("attention_fwd out " + tag, download(gpu(), go.t), download(cpu(), co.t), 5e-2);
  check_close("attention_fwd lse " + tag, download(gpu(), gl.t), download(cpu(), cl.t), 1e-5);
  if (naive) check_close("attention_fwd probs " + tag, download(gpu(), gp.t), download(cpu(), cp.t), rt);

  // Backward. For bf16 the CPU gets the GPU's forward outputs (out rounded to bf16, probs) so both start equal.
  if (dt == DType::bf16) {
    upload(cpu(), co.t, download(gpu(), go.t));
    if (naive) upload(cpu(), cp.t, download(gpu(), gp.t));
  }
  Dev gdo = make_from(gpu(), dt, {N, D}, dout), gdq = make(gpu(), dqkv_t, {N, 3 * D});
  poison(gdq.t);
  gpu().attention_bwd(impl, s, gdq.t, gdo.t, gq.t, go.t, gl.t, gp.t);
  Dev cdo = make_from(cpu(), DType::f32, {N, D}, dout), cdq = make(cpu(), DType::f32, {N, 3 * D});
  cpu().attention_bwd(impl, s, cdq.t, cdo.t, cq.t, co.t, cl.t, cp.t);
  // dq, dk and dv have different scales (dv is the largest), so each is judged against its own rms.
  const Vec got = download(gpu(), gdq.t), ref = download(cpu(), cdq.t);
  const char* part[3] = {" dq", " dk", " dv"};
  // With T = 1 every query sees one key, the softmax is constant and dq, dk are exactly zero: computed as the
  // cancellation dP - D of two equal sums (each ~|dO||V|), they are judged against dv's scale, not their own zero rms.
  const int first = T == 1 ? 2 : 0;
  if (T == 1) {
    const double bound = (dt == DType::bf16 ? 2e-2 : rt) * rms(columns(ref, 3 * D, 2 * D, D));
    for (int i = 0; i < 2; ++i) {
      double worst = 0;
      for (float x : columns(got, 3 * D, i * D, D)) worst = std::isnan(x) ? INFINITY : std::max(worst, double(std::fabs(x)));
      INFO("attention_bwd" << part[i] << " " << tag << " at T 1: max |got| " << worst << ", bound " << bound);
      CHECK(worst <= bound);
    }
  }
  for (int i = first; i < 3; ++i)
    check_attn("attention_bwd" + std::string(part[i]) + " " + tag + "->" + dn(dqkv_t), columns(got, 3 * D, i * D, D),
               columns(ref, 3 * D, i * D, D), 1e-1);
}

// flash2 runs kernels/flash_attn for d_head 16 and 64, and the naive fallback (no stored probs) for d_head 24.
TEST_CASE("cuda attention (naive; flash2 kernel or its naive fallback) matches cpu", "[cuda][attention]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int T : {1, 7, 100, 513})
    for (int dh : {16, 24, 64})
      for (AttnImpl impl : {AttnImpl::naive, AttnImpl::flash2})
        for (bool causal : {true, false}) {
          attention_case(rng, impl, DType::f32, DType::f32, rng.pick({1, 2}), T, rng.pick({1, 3}), dh, causal);
          attention_case(rng, impl, DType::bf16, rng.pick({0, 1}) ? DType::bf16 : DType::f32, rng.pick({1, 2}), T,
                         rng.pick({1, 3}), dh, causal);
        }
  attention_case(rng, AttnImpl::naive, DType::f32, DType::f32, 1, 64, 2, 128, true);  // d_head 128
}

TEST_CASE("cuda swiglu_fwd / swiglu_bwd match cpu", "[cuda][swiglu]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int N : {1, 7, 100, 513})
    for (int F : {16, 17, 1000, 4096})
      for (DType dt : {DType::f32, DType::bf16}) {
        CAPTURE(N, F, dn(dt));
        const Vec ab = as_dtype(rng.uniform(int64_t(N) * 2 * F, -6.f, 6.f), dt);
        const Vec dg = as_dtype(rng.uniform(int64_t(N) * F), dt);
        Dev gab = make_from(gpu(), dt, {N, 2 * F}, ab), gg = make(gpu(), dt, {N, F});
        poison(gg.t);
        gpu().swiglu_fwd(gg.t, gab.t);
        Dev cab = make_from(cpu(), DType::f32, {N, 2 * F}, ab), cg = make(cpu(), DType::f32, {N, F});
        cpu().swiglu_fwd(cg.t, cab.t);
        check_close(std::string("swiglu_fwd ") + dn(dt), download(gpu(), gg.t), download(cpu(), cg.t), rtol_for(dt));
        Dev gdg = make_from(gpu(), dt, {N, F}, dg), gdab = make(gpu(), dt, {N, 2 * F});
        poison(gdab.t);
        gpu().swiglu_bwd(gdab.t, gdg.t, gab.t);
        Dev cdg = make_from(cpu(), DType::f32, {N, F}, dg), cdab = make(cpu(), DType::f32, {N, 2 * F});
        cpu().swiglu_bwd(cdab.t, cdg.t, cab.t);
        check_close(std::string("swiglu_bwd ") + dn(dt), download(gpu(), gdab.t), download(cpu(), cdab.t),
                    rtol_for(dt));
        // With g: the recomputed forward output, into its own buffer and into dg's (aliased) — bitwise the forward's.
        Dev gg2 = make(gpu(), dt, {N, F});
        poison(gg2.t);
        poison(gdab.t);
        gpu().swiglu_bwd(gdab.t, gdg.t, gab.t, gg2.t);
        check_equal(std::string("swiglu_bwd g ") + dn(dt), download(gpu(), gg2.t), download(gpu(), gg.t));
        check_close(std::string("swiglu_bwd with g ") + dn(dt), download(gpu(), gdab.t), download(cpu(), cdab.t),
                    rtol_for(dt));
        poison(gdab.t);
        gpu().swiglu_bwd(gdab.t, gdg.t, gab.t, gdg.t);
        check_equal(std::string("swiglu_bwd g into dg ") + dn(dt), download(gpu(), gdg.t), download(gpu(), gg.t));
        check_close(std::string("swiglu_bwd g into dg: dab ") + dn(dt), download(gpu(), gdab.t),
                    download(cpu(), cdab.t), rtol_for(dt));
      }
}

TEST_CASE("cuda cross_entropy matches cpu (losses, dlogits, dlogits aliasing logits)", "[cuda][cross_entropy]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int N : {1, 7, 100, 513})
    for (int V : {16, 17, 1000, 10000, 151936})  // V % 8 == 0: the cluster kernel (151936: 4 CTAs a row in bf16,
                                                  // 8 in f32); 17: the scalar one
      for (DType dt : {DType::f32, DType::bf16})
        for (int mode = 0; mode < 3; ++mode) {  // 0: losses only, 1: separate dlogits, 2: dlogits = logits
          if (V > 10000 && N > 7) continue;  // the 8B vocab: a few rows
          CAPTURE(N, V, dn(dt), mode);
          const Vec logits = as_dtype(rng.uniform(int64_t(N) * V, -8.f, 8.f), dt);
          const auto targets = rng.ints(N, 0, V);
          const float dscale = 1.f / float(N);
          Dev gl = make_from(gpu(), dt, {N, V}, logits), gt = make_i32(gpu(), targets),
              gloss = make(gpu(), DType::f32, {N});
          Dev gd = mode == 1 ? make(gpu(), dt, {N, V}) : Dev{};
          poison(gloss.t);
          if (mode == 1) poison(gd.t);
          Tensor gdl = mode == 0 ? Tensor{} : (mode == 1 ? gd.t : gl.t);
          gpu().cross_entropy(gloss.t, gdl, gl.t, gt.t, dscale);
          Dev cl = make_from(cpu(), DType::f32, {N, V}, logits), ct = make_i32(cpu(), targets),
              closs = make(cpu(), DType::f32, {N}), cd = make(cpu(), DType::f32, {N, V});
          cpu().cross_entropy(closs.t, mode == 0 ? Tensor{} : cd.t, cl.t, ct.t, dscale);
          check_close("cross_entropy losses", download(gpu(), gloss.t), download(cpu(), closs.t), 1e-5);
          if (mode > 0)
            check_close(std::string("cross_entropy dlogits ") + dn(dt) + (mode == 2 ? " in place" : ""),
                        download(gpu(), gdl), download(cpu(), cd.t), rtol_for(dt));
        }
}

TEST_CASE("cuda cross_entropy: -inf and NaN logits, bad targets, mixed dtypes, in both kernels", "[cuda][cross_entropy]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  // V 17: the scalar kernel; 1024: the cluster kernel with one CTA a row; 151944 = 8 x 18993: clusters of 4 (bf16) and
  // 8 (f32) CTAs whose last segment is shorter than the others.
  for (int V : {17, 1024, 151944})
    for (DType dt : {DType::f32, DType::bf16}) {
      const DType dd = dt == DType::f32 ? DType::bf16 : DType::f32;  // dlogits in the other dtype
      CAPTURE(V, dn(dt));
      const int N = 5;
      Vec x = as_dtype(rng.uniform(int64_t(N) * V, -4.f, 4.f), dt);
      x[size_t(0) * V + 3] = -INFINITY;                             // row 0: a -inf logit: finite loss, dlogit 0
      x[size_t(1) * V + size_t(V) / 2] = std::numeric_limits<float>::quiet_NaN();  // row 1: a NaN logit: NaN loss
      const std::vector<int32_t> t = {0, 0, -1, V, 1};                // rows 2, 3: targets outside [0, V)
      const float dscale = 0.25f;
      Dev gl = make_from(gpu(), dt, {N, V}, x), gt = make_i32(gpu(), t), gloss = make(gpu(), DType::f32, {N}),
          gd = make(gpu(), dd, {N, V});
      poison(gloss.t);
      poison(gd.t);
      gpu().cross_entropy(gloss.t, gd.t, gl.t, gt.t, dscale);
      const Vec loss = download(gpu(), gloss.t), d = download(gpu(), gd.t);
      for (int n : {0, 4}) {  // fp64 reference of the finite rows
        double m = -INFINITY, sum = 0;
        for (int v = 0; v < V; ++v) m = std::max(m, double(x[size_t(n) * V + v]));
        for (int v = 0; v < V; ++v) sum += std::exp(double(x[size_t(n) * V + v]) - m);
        const double lse = m + std::log(sum), ref = lse - double(x[size_t(n) * V + t[size_t(n)]]);
        CAPTURE(n, ref, loss[size_t(n)]);
        CHECK(std::abs(double(loss[size_t(n)]) - ref) <= 1e-5 * (std::abs(ref) + 1));
        double worst = 0;
        for (int v = 0; v < V; ++v) {
          const double want = dscale * (std::exp(double(x[size_t(n) * V + v]) - lse) - (v == t[size_t(n)] ? 1 : 0));
          worst = std::max(worst, std::abs(double(d[size_t(n) * V + v]) - want) / dscale);
        }
        CHECK(worst <= (dd == DType::bf16 ? 4e-3 : 1e-5));  // dlogits / dscale lie in [-1, 1]
      }
      CHECK(d[3] == 0.f);  // exp(-inf - lse) = 0
      for (int n : {1, 2, 3}) {
        CAPTURE(n);
        CHECK(std::isnan(loss[size_t(n)]));
      }
      for (int n : {2, 3}) {  // a bad target: the whole dlogits row is NaN
        size_t not_nan = 0;
        for (int v = 0; v < V; ++v) not_nan += !std::isnan(d[size_t(n) * V + v]);
        CAPTURE(n);
        CHECK(not_nan == 0);
      }
    }
}

TEST_CASE("cuda sum and sum_squares match cpu and are deterministic", "[cuda][reductions]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(100), int64_t(513), int64_t(4096), int64_t(1000003),
                    int64_t(1) << 24}) {
    CAPTURE(n);
    const Vec x = rng.uniform(n, -1.f, 1.f);
    Dev g = make_from(gpu(), DType::f32, {n}, x), c = make_from(cpu(), DType::f32, {n}, x);
    double abs_sum = 0;
    for (float v : x) abs_sum += std::fabs(double(v));
    // Both accumulate in fp64; only the order differs: |error| <= n * 2^-53 * sum|x| (1e-9 covers n = 2^24).
    const double s_g = gpu().sum(g.t), s_c = cpu().sum(c.t);
    CHECK(std::fabs(s_g - s_c) <= 1e-9 * abs_sum);
    const double q_g = gpu().sum_squares(g.t), q_c = cpu().sum_squares(c.t);
    CHECK(std::fabs(q_g - q_c) <= 1e-9 * q_c);
    note("sum (relative to sum|x|)", std::fabs(s_g - s_c) / abs_sum, 1e-9);
    note("sum_squares", std::fabs(q_g - q_c) / q_c, 1e-9);
    CHECK(gpu().sum(g.t) == s_g);  // bitwise the same on a second run
    CHECK(gpu().sum_squares(g.t) == q_g);
  }
  // bf16 input (not on the CPU backend): against an fp64 host sum of the rounded values.
  const Vec x = round_bf16(rng.uniform(100003));
  Dev g = make_from(gpu(), DType::bf16, {100003}, x);
  double ref = 0, ref2 = 0;
  for (float v : x) ref += double(v), ref2 += double(v) * double(v);
  CHECK(std::fabs(gpu().sum(g.t) - ref) <= 1e-9 * 100003);
  CHECK(std::fabs(gpu().sum_squares(g.t) - ref2) <= 1e-9 * ref2);
}

TEST_CASE("cuda add_inplace, scale, cast, fill, copy match cpu", "[cuda][elementwise]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(513), int64_t(100003)}) {
    CAPTURE(n);
    const Vec x = rng.uniform(n, -3.f, 3.f), y = rng.uniform(n, -3.f, 3.f);
    const float a = rng.uniform(1, -2.f, 2.f)[0];
    // f32: one rounding of the same value on both sides, so exactly equal.
    Dev gx = make_from(gpu(), DType::f32, {n}, x), gy = make_from(gpu(), DType::f32, {n}, y);
    Dev cx = make_from(cpu(), DType::f32, {n}, x), cy = make_from(cpu(), DType::f32, {n}, y);
    gpu().add_inplace(gx.t, gy.t);
    cpu().add_inplace(cx.t, cy.t);
    check_equal("add_inplace f32", download(gpu(), gx.t), download(cpu(), cx.t));
    gpu().scale(gx.t, a);
    cpu().scale(cx.t, a);
    check_equal("scale f32", download(gpu(), gx.t), download(cpu(), cx.t));
    // bf16 (CUDA only): against the host's fp32 result rounded once to bf16.
    const Vec xb = round_bf16(x), yb = round_bf16(y);
    Dev bx = make_from(gpu(), DType::bf16, {n}, xb), by = make_from(gpu(), DType::bf16, {n}, yb);
    gpu().add_inplace(bx.t, by.t);
    Vec ref(static_cast<size_t>(n));
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = round_bf16(xb[i] + yb[i]);
    check_equal("add_inplace bf16", download(gpu(), bx.t), ref);
    gpu().scale(bx.t, a);
    for (auto& v : ref) v = round_bf16(v * a);
    check_equal("scale bf16", download(gpu(), bx.t), ref);
    // cast f32 -> bf16 -> f32 and plain copies.
    Dev c16 = make(gpu(), DType::bf16, {n}), c32 = make(gpu(), DType::f32, {n});
    poison(c16.t);
    poison(c32.t);
    Dev src = make_from(gpu(), DType::f32, {n}, x);
    gpu().cast(c16.t, src.t);
    check_equal("cast f32->bf16", download(gpu(), c16.t), round_bf16(x));
    gpu().cast(c32.t, c16.t);
    check_equal("cast bf16->f32", download(gpu(), c32.t), round_bf16(x));
    gpu().cast(c32.t, src.t);
    check_equal("cast f32->f32", download(gpu(), c32.t), x);
    Dev cpy = make(gpu(), DType::f32, {n});
    poison(cpy.t);
    gpu().copy(cpy.t.data, src.t.data, size_t(n) * 4);
    check_equal("copy", download(gpu(), cpy.t), x);
    // fill in each dtype.
    gpu().fill(c32.t, 0.375f);
    check_equal("fill f32", download(gpu(), c32.t), Vec(size_t(n), 0.375f));
    gpu().fill(c16.t, 1.f / 3.f);
    check_equal("fill bf16", download(gpu(), c16.t), Vec(size_t(n), round_bf16(1.f / 3.f)));
    Dev ci = make(gpu(), DType::i32, {n});
    gpu().fill(ci.t, -7.f);
    std::vector<int32_t> got(static_cast<size_t>(n));
    gpu().copy_to_host(got.data(), ci.t.data, got.size() * 4);
    CHECK(std::all_of(got.begin(), got.end(), [](int32_t v) { return v == -7; }));
  }
}

TEST_CASE("cuda adamw matches cpu, with bf16 and f32 working copies", "[cuda][adamw]") {
  REQUIRE_GPU();
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(513), int64_t(1000003)})
    for (int offset : {0, 1})        // 1: views one element in, not 16-byte aligned (the scalar path)
      for (int work = 0; work < 3; ++work) {  // no working copy, bf16, f32
        CAPTURE(n, offset, work);
        AdamWArgs a;
        a.lr = 3e-3f, a.weight_decay = 0.1f, a.grad_scale = 0.5f;
        const Vec p = rng.uniform(n), g = rng.uniform(n), m = rng.uniform(n, -0.1f, 0.1f),
                  v = rng.uniform(n, 0.f, 0.01f);
        Dev bufs[4];
        Tensor gt[4];
        const Vec* init[4] = {&p, &g, &m, &v};
        for (int i = 0; i < 4; ++i) {
          bufs[i] = make(gpu(), DType::f32, {n + 1});
          gt[i] = bufs[i].t.slice(offset, {n});
          upload(gpu(), gt[i], *init[i]);
        }
        Dev cp = make_from(cpu(), DType::f32, {n}, p), cg = make_from(cpu(), DType::f32, {n}, g),
            cm = make_from(cpu(), DType::f32, {n}, m), cv = make_from(cpu(), DType::f32, {n}, v);
        const DType wt = work == 2 ? DType::f32 : DType::bf16;
        Dev pw = work ? make(gpu(), wt, {n}) : Dev{};
        double ref_sumsq = 0;  // sum g^2 of g as given (before grad_scale), in double on the host
        for (float x : g) ref_sumsq += double(x) * double(x);
        for (int64_t t : {1, 2, 10}) {  // three steps: the bias corrections change
          a.t = t;
          a.grad_sumsq = t != 2;  // the fused gradient norm on and off must give the same update
          if (work) poison(pw.t);
          const double sumsq = gpu().adamw(gt[0], gt[1], gt[2], gt[3], pw.t, a);
          cpu().adamw(cp.t, cg.t, cm.t, cv.t, Tensor{}, a);
          if (a.grad_sumsq) {
            INFO("fused sum of squares " << sumsq << ", host fp64 " << ref_sumsq);
            CHECK(std::fabs(sumsq - ref_sumsq) <= 1e-12 * ref_sumsq);
          } else {
            CHECK(sumsq == 0.0);
          }
        }
        const Vec gp = download(gpu(), gt[0]);
        check_close("adamw p", gp, download(cpu(), cp.t), 1e-5);
        check_close("adamw m", download(gpu(), gt[2]), download(cpu(), cm.t), 1e-5);
        check_close("adamw v", download(gpu(), gt[3]), download(cpu(), cv.t), 1e-5);
        if (work) check_equal(std::string("adamw p_work ") + dn(wt), download(gpu(), pw.t), as_dtype(gp, wt));
      }
}

namespace {
/// The op names a backend's ScopedRanges push (which path an op took).
struct NameSink : RangeSink {
  std::vector<std::string> names;
  void push(const char* name, const char*, int) override { names.emplace_back(name); }
  void pop() override {}
  bool saw(const std::string& n) const { return std::find(names.begin(), names.end(), n) != names.end(); }
};
}  // namespace

TEST_CASE("cuda matmul_dw_adamw (weight gradient + AdamW in one kernel) matches the cpu's product then adamw",
          "[cuda][adamw][dw_adamw]") {
  REQUIRE_GPU();
  // optimizer.in_gemm: g = dYᵀ X never stored, AdamW from the product's accumulators (kernels/dw_adamw on sm_90;
  // elsewhere the default: the product into a temporary, then adamw); with g_buf and accumulate (the earlier microbatches' sum)
  // g = g_buf + dYᵀ X. The cpu runs the default on the same bf16 values in fp32. Shapes: one tile, ragged M / N / K
  // (a second 64-column box wholly past M), both tile orders, several tiles per CTA.
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  const std::string dev = gpu().description();
  const bool hopper = dev.find("H100") != std::string::npos || dev.find("H200") != std::string::npos;
  struct Shape {
    int M, N, K;
  };
  for (const Shape& sh : {Shape{128, 128, 64}, Shape{200, 136, 100}, Shape{64, 8, 16}, Shape{384, 256, 512},
                          Shape{136, 520, 256}, Shape{2304, 768, 2048}}) {  // M < N: the tiles walk M first
    for (bool with_acc : {false, true}) {
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      CAPTURE(M, N, K, with_acc);
      const Vec dy = round_bf16(rng.uniform(K * M)), x = round_bf16(rng.uniform(K * N));
      const Vec p = rng.uniform(M * N, -0.05f, 0.05f), m = rng.uniform(M * N, -1.f, 1.f),
                v = rng.uniform(M * N, 1.f, 4.f);  // a mid-training state: the update is smooth in g
      Dev gdy = make_from(gpu(), DType::bf16, {K, M}, dy), gx = make_from(gpu(), DType::bf16, {K, N}, x);
      Dev gp = make_from(gpu(), DType::f32, {M * N}, p), gm = make_from(gpu(), DType::f32, {M * N}, m),
          gv = make_from(gpu(), DType::f32, {M * N}, v), gw = make(gpu(), DType::bf16, {M * N}),
          gsum = make(gpu(), DType::f32, {2});
      Dev cdy = make_from(cpu(), DType::f32, {K, M}, dy), cx = make_from(cpu(), DType::f32, {K, N}, x);
      Dev cp = make_from(cpu(), DType::f32, {M * N}, p), cm = make_from(cpu(), DType::f32, {M * N}, m),
          cv = make_from(cpu(), DType::f32, {M * N}, v);
      const Vec acc = rng.uniform(M * N, -2.f, 2.f);  // the earlier microbatches' sum, about one product's size
      Dev gacc = make_from(gpu(), DType::f32, {M * N}, acc), cacc = make_from(cpu(), DType::f32, {M * N}, acc);
      poison(gw.t);
      AdamWArgs a;
      a.lr = 1e-3f, a.beta2 = 0.95f, a.weight_decay = 0.1f, a.t = 3, a.grad_sumsq = true;
      a.sumsq_to = static_cast<double*>(gsum.t.data);
      NameSink names;
      gpu().set_range_sink(&names);
      gpu().matmul_dw_adamw(gp.t, gm.t, gv.t, gw.t, gdy.t, gx.t, a, with_acc ? gacc.t : Tensor{}, with_acc);
      gpu().set_range_sink(nullptr);
      double cpu_sumsq = 0;
      AdamWArgs ac = a;
      ac.sumsq_to = &cpu_sumsq;
      cpu().matmul_dw_adamw(cp.t, cm.t, cv.t, Tensor{}, cdy.t, cx.t, ac, with_acc ? cacc.t : Tensor{}, with_acc);
      INFO(dev << ": " << (names.saw("matmul_dw_adamw") ? "the fused kernel" : "the default (product, adamw)"));
      if (hopper) CHECK(names.saw("matmul_dw_adamw"));
      double gpu_sumsq = 0;
      gpu().copy_to_host(&gpu_sumsq, gsum.t.data, 8);
      CHECK(std::fabs(gpu_sumsq - cpu_sumsq) <= 1e-5 * cpu_sumsq);
      const Vec gpv = download(gpu(), gp.t);
      check_close("matmul_dw_adamw p", gpv, download(cpu(), cp.t), 1e-5);
      check_close("matmul_dw_adamw m", download(gpu(), gm.t), download(cpu(), cm.t), 1e-5);
      check_close("matmul_dw_adamw v", download(gpu(), gv.t), download(cpu(), cv.t), 1e-5);
      check_equal("matmul_dw_adamw p_work", download(gpu(), gw.t), round_bf16(gpv));
    }
  }
}

TEST_CASE("cuda adamw: step values and the clip factor read from device memory equal the by-value launch",
          "[cuda][adamw][graph]") {
  REQUIRE_GPU();
  // What a captured step relies on (jobs/train.cpp, cuda_graph): AdamW's per-step values uploaded to the device
  // (AdamWArgs::step_values) and the clip factor computed there (clip_factor_to, AdamWArgs::grad_scale_by) give the
  // update that the values passed by value give, bit for bit; the factor equals the host's clip_factor.
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  Rng rng(seed);
  const int64_t n = 1000003;
  for (DType dt : {DType::f32, DType::bf16}) {
    CAPTURE(dn(dt));
    const Vec p = rng.uniform(n), g = rng.uniform(n, -0.3f, 0.3f), m = rng.uniform(n, -0.1f, 0.1f),
              v = rng.uniform(n, 0.f, 0.01f);
    Dev a[4], b[4];
    const Vec* init[4] = {&p, &g, &m, &v};
    for (int i = 0; i < 4; ++i) {
      a[i] = make_from(gpu(), dt, {n}, *init[i]);
      b[i] = make_from(gpu(), dt, {n}, *init[i]);
    }
    Dev scalars = make(gpu(), DType::f32, {8});  // AdamWStepValues (16 bytes), the sum of squares (8), the factor
    auto* values = static_cast<AdamWStepValues*>(scalars.t.data);
    auto* sumsq = reinterpret_cast<double*>(static_cast<char*>(scalars.t.data) + 16);
    auto* factor = reinterpret_cast<float*>(static_cast<char*>(scalars.t.data) + 24);
    for (int64_t t : {1, 7}) {
      for (double max_norm : {1e-3, 1e6}) {  // clipping active, and a factor of 1
        CAPTURE(t, max_norm);
        AdamWArgs args;
        args.lr = 2e-3f, args.weight_decay = 0.1f, args.t = t, args.seed = 99;
        args.stochastic_rounding = dt == DType::bf16;
        // By value: the host's norm and clip factor.
        const double norm = std::sqrt(gpu().sum_squares(a[1].t));
        const double host_factor = std::min(1.0, max_norm / (norm + 1e-6));
        AdamWArgs by_value = args;
        by_value.grad_scale = float(host_factor);
        gpu().adamw(a[0].t, a[1].t, a[2].t, a[3].t, Tensor{}, by_value);
        // From device memory.
        const AdamWStepValues host_values = adamw_step_values(args);
        gpu().copy_from_host(values, &host_values, sizeof host_values);
        gpu().clip_factor_to(b[1].t, max_norm, sumsq, factor);
        AdamWArgs from_device = args;
        from_device.lr = 1.f, from_device.t = 1000, from_device.seed = 5;  // ignored: the device values win
        from_device.step_values = values;
        from_device.grad_scale_by = factor;
        gpu().adamw(b[0].t, b[1].t, b[2].t, b[3].t, Tensor{}, from_device);
        double got_sumsq = 0;
        float got_factor = 0;
        gpu().copy_to_host(&got_sumsq, sumsq, 8);
        gpu().copy_to_host(&got_factor, factor, 4);
        CHECK(std::sqrt(got_sumsq) == norm);
        CHECK(got_factor == float(host_factor));
        for (int i : {0, 2, 3}) {
          INFO("tensor " << "pgmv"[i]);
          check_equal("adamw from device values", download(gpu(), b[i].t), download(gpu(), a[i].t));
        }
      }
    }
  }
}

TEST_CASE("cuda op errors: shape and dtype mismatches raise RuntimeError", "[cuda]") {
  REQUIRE_GPU();
  Dev a = make(gpu(), DType::f32, {4, 8}), b = make(gpu(), DType::f32, {4, 8}), c = make(gpu(), DType::f32, {4, 4});
  Dev h = make(gpu(), DType::bf16, {8, 4});
  CHECK_THROWS_AS(gpu().matmul(c.t, a.t, false, b.t, false, 1.f, 0.f), RuntimeError);  // [4,8] x [4,8]
  CHECK_THROWS_AS(gpu().matmul(c.t, a.t, false, h.t, false, 1.f, 0.f), RuntimeError);  // f32 x bf16
  gpu().matmul(c.t, a.t, false, b.t, true, 1.f, 0.f);                                  // [4,8] x [8,4]: fine
  CHECK_THROWS_AS(gpu().add_inplace(a.t, c.t), RuntimeError);  // 32 vs 16 elements (f32 += bf16 is fine)
  CHECK_THROWS_AS(gpu().swiglu_fwd(a.t, a.t), RuntimeError);  // g [4,8] for ab [4,8] (F = 4)
  CHECK_THROWS_AS(gpu().cast(a.t, c.t), RuntimeError);        // 32 vs 16 elements
  gpu().synchronize();
}

// ---- timing (hidden: `unit_tests "[.cuda-bench]"`) ------------------------------------------------------------------
// Median of `reps` timed runs after 2 warm-ups, with CUDA events on the compute stream. Sizes are chosen to be several
// times the 60 MB L2 where the op is memory bound. GB/s counts the fewest bytes the op must move (each input read
// once, each output written once); compare with the ~4.2 TB/s device-to-device copy of ANCHORS.md.

template <class F>
double median_ms(F&& f, int reps = 10) {
  auto e0 = gpu().make_event(), e1 = gpu().make_event();
  f();
  f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    gpu().record(*e0);
    f();
    gpu().record(*e1);
    ms.push_back(gpu().elapsed_ms(*e0, *e1));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_line(const char* name, const std::string& shape, double ms, double bytes, double flops) {
  if (flops > 0)
    std::printf("%-22s %-34s %9.4f ms %9.1f TFLOP/s\n", name, shape.c_str(), ms, flops / ms * 1e-9);
  else
    std::printf("%-22s %-34s %9.4f ms %9.1f GB/s\n", name, shape.c_str(), ms, bytes / ms * 1e-6);
}

/// Random values, drawn for the first 2^20 elements and repeated through the rest by device copies (drawing
/// gigabytes on the host would take longer than the timings).
Dev rand_dev(Rng& rng, DType dt, std::initializer_list<int64_t> shape, float lo = -1.f, float hi = 1.f) {
  Dev d = make(gpu(), dt, shape);
  const int64_t n = d.t.numel(), chunk = std::min<int64_t>(n, int64_t(1) << 20);
  const size_t es = dtype_size(dt);
  upload(gpu(), d.t.slice(0, {chunk}), rng.uniform(chunk, lo, hi));
  for (int64_t off = chunk; off < n; off += chunk)
    gpu().copy(static_cast<char*>(d.t.data) + off * int64_t(es), d.t.data, size_t(std::min(chunk, n - off)) * es);
  return d;
}

TEST_CASE("cuda ops: timings", "[.cuda-bench]") {
  REQUIRE_GPU();
  Rng rng(fresh_seed());
  std::printf("\n%-22s %-34s %12s %17s\n", "op", "shape", "median", "rate");
  const DType bf = DType::bf16, f32 = DType::f32;
  {  // matrix products
    for (DType ab : {bf, f32}) {
      const int64_t n = ab == bf ? 8192 : 4096;
      Dev a = rand_dev(rng, ab, {n, n}), b = rand_dev(rng, ab, {n, n}), c = make(gpu(), ab, {n, n});
      const double ms = median_ms([&] { gpu().matmul(c.t, a.t, false, b.t, true, 1.f, 0.f); });
      bench_line(ab == bf ? "matmul bf16" : "matmul f32 (no tf32)", fmt::format("{0}x{0}x{0}", n), ms, 0,
                 2.0 * n * n * n);
    }
    const int64_t N = 2048, D = 2560, O = 7680;  // xl qkv projection, batch 4 x 512
    Dev x = rand_dev(rng, bf, {N, D}), w = rand_dev(rng, bf, {O, D}), y = make(gpu(), bf, {N, O});
    Dev dy = rand_dev(rng, bf, {N, O}), dw = rand_dev(rng, f32, {O, D});
    bench_line("matmul bf16 x Wt", "2048x7680x2560 (xl qkv)",
               median_ms([&] { gpu().matmul(y.t, x.t, false, w.t, true, 1.f, 0.f); }), 0, 2.0 * N * D * O);
    bench_line("matmul dWt += dYt X f32", "7680x2560x2048 bf16 -> f32 acc",
               median_ms([&] { gpu().matmul(dw.t, dy.t, true, x.t, false, 1.f, 1.f); }), 0, 2.0 * N * D * O);
  }
  {
    const int64_t N = 16384, D = 4096;
    Dev x = rand_dev(rng, bf, {N, D}), w = rand_dev(rng, f32, {D}), y = make(gpu(), bf, {N, D}),
        r = make(gpu(), f32, {N}), dy = rand_dev(rng, bf, {N, D}), dx = rand_dev(rng, bf, {N, D}),
        dw = rand_dev(rng, f32, {D});
    bench_line("rmsnorm_fwd bf16", "16384x4096",
               median_ms([&] { gpu().rmsnorm_fwd(y.t, r.t, x.t, w.t, 1e-5f); }), 2.0 * 2 * N * D, 0);
    bench_line("rmsnorm_bwd bf16", "16384x4096",
               median_ms([&] { gpu().rmsnorm_bwd(dx.t, dw.t, dy.t, x.t, w.t, r.t); }), 4.0 * 2 * N * D, 0);
    Dev table = rand_dev(rng, bf, {32000, D}), dtable = rand_dev(rng, f32, {32000, D});
    Dev tok = make_i32(gpu(), rng.ints(N, 0, 32000));
    bench_line("embedding_fwd bf16", "16384x4096, V 32000",
               median_ms([&] { gpu().embedding_fwd(y.t, tok.t, table.t); }), 2.0 * 2 * N * D, 0);
    bench_line("embedding_bwd ->f32", "16384x4096, V 32000",
               median_ms([&] { gpu().embedding_bwd(dtable.t, tok.t, dy.t); }), 2.0 * N * D + 8.0 * N * D, 0);
  }
  {
    AttnShape s;
    s.B = 4, s.T = 4096, s.H = 32, s.d_head = 128;
    const int64_t N = int64_t(s.B) * s.T, D = 4096;
    Dev qkv = rand_dev(rng, bf, {N, 3 * D});
    bench_line("rope bf16", "16384 rows, 32x128",
               median_ms([&] { gpu().rope(qkv.t, s, 10000.f, false); }), 2.0 * 2 * 2 * N * D, 0);
  }
  {
    const int64_t N = 16384, F = 10240;
    Dev ab = rand_dev(rng, bf, {N, 2 * F}, -4.f, 4.f), g = make(gpu(), bf, {N, F}), dg = rand_dev(rng, bf, {N, F}),
        dab = make(gpu(), bf, {N, 2 * F});
    bench_line("swiglu_fwd bf16", "16384x10240", median_ms([&] { gpu().swiglu_fwd(g.t, ab.t); }), 3.0 * 2 * N * F, 0);
    bench_line("swiglu_bwd bf16", "16384x10240", median_ms([&] { gpu().swiglu_bwd(dab.t, dg.t, ab.t); }),
               5.0 * 2 * N * F, 0);
  }
  {
    const int64_t N = 16384, V = 32000;
    Dev logits = rand_dev(rng, bf, {N, V}, -8.f, 8.f), loss = make(gpu(), f32, {N}),
        tgt = make_i32(gpu(), rng.ints(N, 0, int32_t(V)));
    bench_line("cross_entropy bf16", "16384x32000, dlogits in place",
               median_ms([&] { gpu().cross_entropy(loss.t, logits.t, logits.t, tgt.t, 1.f / N); }), 2.0 * 2 * N * V,
               0);
  }
  {  // the 8B head's chunk of v8-v10 (2560 tokens x vocab 151936; 3328 since v11)
    const int64_t N = 2560, V = 151936;
    Dev logits = rand_dev(rng, bf, {N, V}, -8.f, 8.f), loss = make(gpu(), f32, {N}),
        tgt = make_i32(gpu(), rng.ints(N, 0, int32_t(V)));
    bench_line("cross_entropy bf16", "2560x151936, dlogits in place",
               median_ms([&] { gpu().cross_entropy(loss.t, logits.t, logits.t, tgt.t, 1.f / N); }), 2.0 * 2 * N * V,
               0);
  }
  {
    const int64_t n = int64_t(1) << 28;
    Dev p = rand_dev(rng, f32, {n}), g = rand_dev(rng, f32, {n}, -1e-3f, 1e-3f), m = make(gpu(), f32, {n}),
        v = make(gpu(), f32, {n}), w = make(gpu(), bf, {n});
    gpu().fill(m.t, 0.f);
    gpu().fill(v.t, 0.f);
    AdamWArgs a;
    bench_line("adamw + bf16 copy", "2^28 params", median_ms([&] { gpu().adamw(p.t, g.t, m.t, v.t, w.t, a); }),
               30.0 * n, 0);
    bench_line("sum_squares f32 (sync)", "2^28", median_ms([&] { (void)gpu().sum_squares(g.t); }), 4.0 * n, 0);
    bench_line("cast f32->bf16", "2^28", median_ms([&] { gpu().cast(w.t, p.t); }), 6.0 * n, 0);
    bench_line("add_inplace f32", "2^28", median_ms([&] { gpu().add_inplace(m.t, g.t); }), 12.0 * n, 0);
    bench_line("scale f32", "2^28", median_ms([&] { gpu().scale(m.t, 0.5f); }), 8.0 * n, 0);
    bench_line("copy f32", "2^28", median_ms([&] { gpu().copy(m.t.data, p.t.data, size_t(n) * 4); }), 8.0 * n, 0);
  }
  for (int causal_long = 0; causal_long < 2; ++causal_long) {  // xl attention, then one long sequence (16 x 64)
    AttnShape s;
    if (causal_long == 0)
      s.B = 4, s.T = 512, s.H = 32, s.d_head = 80;
    else
      s.B = 1, s.T = 16384, s.H = 16, s.d_head = 64;
    s.scale = 1.f / std::sqrt(float(s.d_head));
    const int64_t N = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
    const AttnImpl impl = causal_long ? AttnImpl::flash2 : AttnImpl::naive;  // flash2: kernels/flash_attn (d_head 64)
    Dev qkv = rand_dev(rng, bf, {N, 3 * D}), out = make(gpu(), bf, {N, D}), lse = make(gpu(), f32, {s.B, s.H, s.T}),
        dout = rand_dev(rng, bf, {N, D}), dqkv = make(gpu(), bf, {N, 3 * D});
    Dev probs = causal_long ? Dev{} : make(gpu(), bf, {s.B, s.H, s.T, s.T});
    const double flops = 4.0 * s.B * s.H * double(s.T) * s.T * s.d_head / 2;  // causal: half of the square
    const std::string shape = fmt::format("B{} T{} {}x{} causal", s.B, s.T, s.H, s.d_head);
    const int reps = causal_long ? 3 : 10;
    const double fwd = median_ms([&] { gpu().attention_fwd(impl, s, out.t, lse.t, probs.t, qkv.t); }, reps);
    bench_line(causal_long ? "attn flash2 fwd bf16" : "attn naive fwd bf16", shape, fwd, 0, flops);
    const double bwd = median_ms(
        [&] { gpu().attention_bwd(impl, s, dqkv.t, dout.t, qkv.t, out.t, lse.t, probs.t); }, reps);
    bench_line(causal_long ? "attn flash2 bwd bf16" : "attn naive bwd bf16", shape, bwd, 0, 2.5 * flops);
  }
  std::printf("(causal attention TFLOP/s count half of 4 B H T^2 d_head, x2.5 for the backward, as flash-attention's "
              "benchmarks do; the naive path computes the full square)\n");
  SUCCEED();
}

TEST_CASE("cuda ops: largest normalised errors (report)", "[cuda][report]") {
  REQUIRE_GPU();
  std::printf("\n%-52s %12s %10s\n", "check", "max err", "tol");
  for (const auto& [name, e] : error_table()) std::printf("%-52s %12.3e %10.1e\n", name.c_str(), e.first, e.second);
  std::printf("(err: max |got-ref| / (|ref| + rms(ref)); normwise for matmul; 1 = mismatch for exact checks)\n");
  SUCCEED();
}

}  // namespace
