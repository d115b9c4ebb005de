// bf16 storage of parameters, gradients and AdamW state on the CUDA backend, against the CPU backend's emulation
// (tests/test_bf16_storage.cpp checks that against double references). Both compute in fp32 and round once, so most
// results are bitwise equal; where the fp32 evaluation order differs (FMA contraction, summation order) a result may
// be the neighbouring bf16 value: every element must be within one bf16 step of the CPU's and at least 98% equal.
// Ops whose fp32 arithmetic is the same on both sides (embedding_bwd's ordered sums, add, scale, cast, fill) must be
// bitwise equal.
//
// Tagged [cuda][bf16]; every case returns with a warning when no GPU is visible (Catch2 2.13 has no SKIP).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "device_tensor.h"
#include "test_helpers.h"

namespace {

using namespace trainer;
using namespace trainer::testing;

Vec rnd(int64_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

/// One bf16 step at |x| (the spacing of bf16 values around x).
double bf16_step(double x) {
  int e = 0;
  std::frexp(x == 0 ? 1e-30 : x, &e);
  return std::ldexp(1.0, std::max(e - 8, -133));
}

/// got and ref (bf16 values) within one bf16 step everywhere and equal in at least min_equal of the elements. Steps
/// are taken at least at 2^-20 of the largest |ref| (results of cancellation, e.g. m = b1 m + (1 - b1) g near 0,
/// carry the fp32 error of the terms, not of the result: FMA contraction differs between nvcc and the host compiler).
void check_near_bitwise(const std::string& name, const Vec& got, const Vec& ref, double min_equal = 0.98) {
  REQUIRE(got.size() == ref.size());
  double scale = 0;
  for (float r : ref) scale = std::max(scale, std::fabs(double(r)));
  size_t equal = 0, far = 0, first_far = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == ref[i]) {
      ++equal;
      continue;
    }
    const double step = std::max(bf16_step(std::max(std::fabs(double(got[i])), std::fabs(double(ref[i])))),
                                 std::ldexp(scale, -20));
    if (!(std::fabs(double(got[i]) - double(ref[i])) <= step) && far++ == 0) first_far = i;
  }
  INFO(name << ": " << equal << " of " << got.size() << " equal, " << far << " more than one bf16 step apart (first at "
            << first_far << ": " << (far ? got[first_far] : 0.f) << " vs " << (far ? ref[first_far] : 0.f) << ")");
  CHECK(far == 0);
  CHECK(double(equal) >= min_equal * double(got.size()));
}

/// A bf16 (or f32) tensor of n elements at element `offset` of a fresh buffer on `be`, holding v.
struct Slice {
  Dev buf;
  Tensor t;
};
Slice slice(Backend& be, DType dt, int64_t n, int64_t offset, const Vec& v) {
  Slice s;
  s.buf = make(be, dt, {offset + n + 8});
  be.fill(s.buf.t, 0.f);  // the caching allocator hands out used memory: the elements around the slice start at 0
  s.t = s.buf.t.slice(offset, {n});
  upload(be, s.t, v);
  return s;
}

}  // namespace

TEST_CASE("cuda bf16 adamw matches the cpu's, nearest and stochastic rounding, any length and start",
          "[cuda][bf16][adamw]") {
  REQUIRE_GPU();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(1000), int64_t(4099), int64_t(100003)})
    for (int64_t off : {0, 1, 3, 64})
      for (int layout = 0; layout < 2; ++layout)  // 1: g one element further in than p, m, v (element-wise loads)
        for (bool stochastic : {false, true}) {
          CAPTURE(n, off, layout, stochastic);
          AdamWArgs a;
          a.lr = 1e-2f, a.beta2 = 0.95f, a.weight_decay = 0.1f, a.grad_scale = 0.5f;
          a.stochastic_rounding = stochastic;
          a.seed = 99;
          a.index_offset = 1000 * off + 5;
          const Vec p = round_bf16(rnd(n, 1)), m = round_bf16(rnd(n, 2, -0.1f, 0.1f)),
                    v = round_bf16(rnd(n, 3, 0.f, 0.01f));
          Slice gp = slice(gpu(), DType::bf16, n, off, p), gm = slice(gpu(), DType::bf16, n, off, m),
                gv = slice(gpu(), DType::bf16, n, off, v);
          Dev cp = make_from(cpu(), DType::bf16, {n}, p), cm = make_from(cpu(), DType::bf16, {n}, m),
              cv = make_from(cpu(), DType::bf16, {n}, v);
          Dev sumsq_dev = make(gpu(), DType::f64, {1});
          for (int64_t t = 1; t <= 3; ++t) {
            a.t = t;
            const Vec g = round_bf16(rnd(n, 10 + t, -2.f, 2.f));
            Slice gg = slice(gpu(), DType::bf16, n, off + layout, g);
            Dev cg = make_from(cpu(), DType::bf16, {n}, g);
            double want = 0;
            for (float x : g) want += double(x) * double(x);
            a.grad_sumsq = true;
            a.sumsq_to = t == 2 ? sumsq_dev.t.ptr<double>() : nullptr;  // step 2: written on the device, no sync
            const double got = gpu().adamw(gp.t, gg.t, gm.t, gv.t, Tensor(), a);
            a.sumsq_to = nullptr;
            cpu().adamw(cp.t, cg.t, cm.t, cv.t, Tensor(), a);
            if (t == 2) {
              CHECK(got == 0.0);
              double dev = 0;
              gpu().copy_to_host(&dev, sumsq_dev.t.data, sizeof(double));
              CHECK(dev == Approx(want).epsilon(1e-12));
            } else {
              CHECK(got == Approx(want).epsilon(1e-12));
            }
            // compare, then continue both from the CPU's state (differences must not compound)
            check_near_bitwise("adamw bf16 p", download(gpu(), gp.t), download(cpu(), cp.t), n < 100 ? 0.8 : 0.98);
            check_near_bitwise("adamw bf16 m", download(gpu(), gm.t), download(cpu(), cm.t), n < 100 ? 0.8 : 0.98);
            check_near_bitwise("adamw bf16 v", download(gpu(), gv.t), download(cpu(), cv.t), n < 100 ? 0.8 : 0.98);
            upload(gpu(), gp.t, download(cpu(), cp.t));
            upload(gpu(), gm.t, download(cpu(), cm.t));
            upload(gpu(), gv.t, download(cpu(), cv.t));
          }
          const Vec after = download(gpu(), gp.buf.t);  // the elements around the range are untouched (zeros)
          for (int64_t i = 0; i < off; ++i) CHECK(after[size_t(i)] == 0.f);
          for (int64_t i = off + n; i < off + n + 8; ++i) CHECK(after[size_t(i)] == 0.f);
        }
}

TEST_CASE("cuda bf16 adamw, stochastic rounding: bitwise the same however the range is split", "[cuda][bf16][adamw]") {
  REQUIRE_GPU();
  const int64_t n = 100003;
  AdamWArgs a;
  a.lr = 1e-3f, a.t = 7, a.stochastic_rounding = true, a.seed = 1234;
  const Vec p = round_bf16(rnd(n, 21)), g = round_bf16(rnd(n, 22)), m = round_bf16(rnd(n, 23, -0.1f, 0.1f)),
            v = round_bf16(rnd(n, 24, 0.f, 0.01f));
  auto run = [&](std::vector<int64_t> cuts) {
    Dev tp = make_from(gpu(), DType::bf16, {n}, p), tg = make_from(gpu(), DType::bf16, {n}, g),
        tm = make_from(gpu(), DType::bf16, {n}, m), tv = make_from(gpu(), DType::bf16, {n}, v);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t lo = cuts[k], len = cuts[k + 1] - cuts[k];
      AdamWArgs b = a;
      b.index_offset = 555 + lo;
      gpu().adamw(tp.t.slice(lo, {len}), tg.t.slice(lo, {len}), tm.t.slice(lo, {len}), tv.t.slice(lo, {len}), Tensor(),
                  b);
    }
    return std::vector<Vec>{download(gpu(), tp.t), download(gpu(), tm.t), download(gpu(), tv.t)};
  };
  const auto one = run({0, n}), again = run({0, n}), split = run({0, 333, 64 * 100, 64 * 100 + 5, n});
  CHECK(one == again);
  CHECK(one == split);
  // the same random bits as the cpu's (backend/bf16.h): nearly all equal to the cpu's result
  Dev cp = make_from(cpu(), DType::bf16, {n}, p), cg = make_from(cpu(), DType::bf16, {n}, g),
      cm = make_from(cpu(), DType::bf16, {n}, m), cv = make_from(cpu(), DType::bf16, {n}, v);
  AdamWArgs b = a;
  b.index_offset = 555;
  cpu().adamw(cp.t, cg.t, cm.t, cv.t, Tensor(), b);
  check_near_bitwise("adamw bf16 stochastic p vs cpu", one[0], download(cpu(), cp.t));
}

TEST_CASE("cuda bf16 matmul into bf16 C with beta 1 (weight gradients) matches the cpu's", "[cuda][bf16][matmul]") {
  REQUIRE_GPU();
  struct Case {
    int64_t M, N, K;
    bool ta, tb;
  };
  for (const Case c : {Case{64, 96, 200, false, false}, Case{96, 64, 512, true, false}, Case{48, 40, 136, false, true}})
    for (float beta : {0.f, 1.f}) {
      CAPTURE(c.M, c.N, c.K, c.ta, c.tb, beta);
      const Vec A = round_bf16(rnd(c.M * c.K, 31)), B = round_bf16(rnd(c.K * c.N, 32)),
                C = round_bf16(rnd(c.M * c.N, 33));
      Dev ga = make(gpu(), DType::bf16, {c.M * c.K}), gb = make(gpu(), DType::bf16, {c.K * c.N}),
          gc = make_from(gpu(), DType::bf16, {c.M, c.N}, C);
      upload(gpu(), ga.t, A);
      upload(gpu(), gb.t, B);
      Dev ca = make_from(cpu(), DType::bf16, {c.M * c.K}, A), cb = make_from(cpu(), DType::bf16, {c.K * c.N}, B),
          cc = make_from(cpu(), DType::bf16, {c.M, c.N}, C);
      const Tensor gA = c.ta ? ga.t.reshape({c.K, c.M}) : ga.t.reshape({c.M, c.K});
      const Tensor cA = c.ta ? ca.t.reshape({c.K, c.M}) : ca.t.reshape({c.M, c.K});
      const Tensor gB = c.tb ? gb.t.reshape({c.N, c.K}) : gb.t.reshape({c.K, c.N});
      const Tensor cB = c.tb ? cb.t.reshape({c.N, c.K}) : cb.t.reshape({c.K, c.N});
      gpu().matmul(gc.t, gA, c.ta, gB, c.tb, 0.5f, beta);
      // beta 0: one rounding of alpha AB on both. beta 1: cuBLASLt rounds alpha AB to bf16 before it adds the bf16 C
      // (measured on the H200: with one rounding 30% of the elements differ, up to 20% where AB and C cancel), i.e.
      // bf16(bf16(alpha AB) + C) -- the semantics of PyTorch's bf16 `grad += new`; the CPU rounds once. The
      // reference for beta 1 is that double rounding, from the CPU's beta-0 product.
      cpu().matmul(cc.t, cA, c.ta, cB, c.tb, 0.5f, 0.f);
      Vec want = download(cpu(), cc.t);
      if (beta != 0.f)
        for (size_t i = 0; i < want.size(); ++i) want[i] = round_bf16(Vec{want[i] + C[i]})[0];
      check_near_bitwise("matmul bf16 C", download(gpu(), gc.t), want);
    }
}

TEST_CASE("cuda bf16 rmsnorm: bf16 w with f32 or bf16 activations, bf16 dw written or accumulated",
          "[cuda][bf16][rmsnorm]") {
  REQUIRE_GPU();
  for (DType act : {DType::f32, DType::bf16})
    for (int64_t D : {int64_t(100), int64_t(256)})  // 256 with bf16 activations: the vector kernels
      for (bool accumulate : {false, true}) {
        CAPTURE(dtype_name(act), D, accumulate);
        const int64_t N = 300;
        const Vec x = as_dtype(rnd(N * D, 41), act), dy = as_dtype(rnd(N * D, 42), act),
                  w = round_bf16(rnd(D, 43, 0.5f, 1.5f)), dw0 = round_bf16(rnd(D, 44, -1.f, 1.f));
        Dev gx = make_from(gpu(), act, {N, D}, x), gdy = make_from(gpu(), act, {N, D}, dy),
            gw = make_from(gpu(), DType::bf16, {D}, w), gy = make(gpu(), act, {N, D}), gr = make(gpu(), DType::f32, {N}),
            gdx = make_from(gpu(), act, {N, D}, Vec(size_t(N * D), 0.f)), gdw = make_from(gpu(), DType::bf16, {D}, dw0);
        Dev cx = make_from(cpu(), DType::f32, {N, D}, x), cdy = make_from(cpu(), DType::f32, {N, D}, dy),
            cw = make_from(cpu(), DType::bf16, {D}, w), cy = make(cpu(), DType::f32, {N, D}),
            cr = make(cpu(), DType::f32, {N}), cdx = make_from(cpu(), DType::f32, {N, D}, Vec(size_t(N * D), 0.f)),
            cdw = make_from(cpu(), DType::bf16, {D}, dw0);
        gpu().rmsnorm_fwd(gy.t, gr.t, gx.t, gw.t, 1e-5f);
        cpu().rmsnorm_fwd(cy.t, cr.t, cx.t, cw.t, 1e-5f);
        const Vec ref_y = as_dtype(download(cpu(), cy.t), act);
        if (act == DType::bf16)
          check_near_bitwise("rmsnorm y bf16", download(gpu(), gy.t), ref_y, 0.95);
        else
          CHECK(testing::all_close(download(gpu(), gy.t), ref_y, 1e-6, 1e-5) == "");
        gpu().rmsnorm_bwd(gdx.t, gdw.t, gdy.t, gx.t, gw.t, gr.t, accumulate);
        cpu().rmsnorm_bwd(cdx.t, cdw.t, cdy.t, cx.t, cw.t, cr.t, accumulate);
        check_near_bitwise("rmsnorm dw bf16", download(gpu(), gdw.t), download(cpu(), cdw.t), 0.9);
      }
}

TEST_CASE("cuda bf16 embedding: bf16 table into f32 rows, bf16 dtable bitwise the cpu's", "[cuda][bf16][embedding]") {
  REQUIRE_GPU();
  const int64_t V = 1000, D = 96, N = 4096;
  std::vector<int32_t> tok(N);
  std::mt19937_64 gen(51);
  for (auto& t : tok) t = int32_t(gen() % 50);  // ~80 repeats per token; 950 rows untouched
  const Vec table = round_bf16(rnd(V * D, 52)), dout = rnd(N * D, 53, -1e-2f, 1e-2f);
  Dev gt = make_from(gpu(), DType::bf16, {V, D}, table), ct = make_from(cpu(), DType::bf16, {V, D}, table);
  Dev gtok = make_i32(gpu(), tok), ctok = make_i32(cpu(), tok);
  Dev gout = make(gpu(), DType::f32, {N, D}), cout = make(cpu(), DType::f32, {N, D});
  gpu().embedding_fwd(gout.t, gtok.t, gt.t);
  cpu().embedding_fwd(cout.t, ctok.t, ct.t);
  CHECK(download(gpu(), gout.t) == download(cpu(), cout.t));
  for (DType tdout : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(tdout));
    const Vec d = as_dtype(dout, tdout);
    Dev gd = make_from(gpu(), tdout, {N, D}, d), cd = make_from(cpu(), DType::f32, {N, D}, d);
    gpu().embedding_bwd(gt.t, gtok.t, gd.t);
    cpu().embedding_bwd(ct.t, ctok.t, cd.t);
    CHECK(download(gpu(), gt.t) == download(cpu(), ct.t));  // both: fp32 sums in increasing n, one rounding
  }
  CHECK(download(cpu(), ct.t) != table);
}

TEST_CASE("cuda bf16 elementwise ops: mixed add_inplace, scale, cast, fill, sum_squares bitwise the cpu's",
          "[cuda][bf16]") {
  REQUIRE_GPU();
  const int64_t n = 10007;
  const Vec x = round_bf16(rnd(n, 61, -3.f, 3.f)), y = rnd(n, 62);
  for (DType tx : {DType::bf16, DType::f32})
    for (DType ty : {DType::bf16, DType::f32}) {
      CAPTURE(dtype_name(tx), dtype_name(ty));
      Dev gx = make_from(gpu(), tx, {n}, x), gy = make_from(gpu(), ty, {n}, y);
      Dev cx = make_from(cpu(), tx, {n}, x), cy = make_from(cpu(), ty, {n}, y);
      gpu().add_inplace(gx.t, gy.t);
      cpu().add_inplace(cx.t, cy.t);
      CHECK(download(gpu(), gx.t) == download(cpu(), cx.t));
    }
  Dev gx = make_from(gpu(), DType::bf16, {n}, x), cx = make_from(cpu(), DType::bf16, {n}, x);
  gpu().scale(gx.t, 0.37f);
  cpu().scale(cx.t, 0.37f);
  CHECK(download(gpu(), gx.t) == download(cpu(), cx.t));
  CHECK(gpu().sum_squares(gx.t) == Approx(cpu().sum_squares(cx.t)).epsilon(1e-12));
  CHECK(gpu().sum(gx.t) == Approx(cpu().sum(cx.t)).epsilon(1e-10));
  Dev g32 = make_from(gpu(), DType::f32, {n}, y), c32 = make_from(cpu(), DType::f32, {n}, y);
  gpu().cast(gx.t, g32.t);
  cpu().cast(cx.t, c32.t);
  CHECK(download(gpu(), gx.t) == download(cpu(), cx.t));
  gpu().cast(g32.t, gx.t);
  cpu().cast(c32.t, cx.t);
  CHECK(download(gpu(), g32.t) == download(cpu(), c32.t));
  gpu().fill(gx.t, 0.1f);
  cpu().fill(cx.t, 0.1f);
  CHECK(download(gpu(), gx.t) == download(cpu(), cx.t));
}
