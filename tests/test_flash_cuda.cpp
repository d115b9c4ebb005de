// FlashAttention-2 on the CUDA backend (kernels/flash_attn) against the CPU backend's naive attention in fp32 on the
// same inputs (bf16 inputs are rounded on the host first and the CPU gets the rounded values in fp32).
//
// Every case draws fresh random inputs (the seed is printed on failure) and NaN-poisons the GPU outputs first, so an
// element the kernels do not write fails. Error = ‖got − ref‖₂ / ‖ref‖₂ per tensor (O, L, dQ, dK, dV), limits from
// issue 5: O and L < 1e-2 (bf16) / 1e-4 (fp32); dQ, dK, dV < 2e-2 / 1e-3. The backward starts from the GPU's own O
// and L (so a bf16 O does not feed the CPU reference), against the CPU gradient from its own fp32 forward: the
// difference is what the flash backward adds.
// Shapes: d_head 16/32/64/96/128 (and 80, the xl preset's), causal and not, T in {1, 17, 100, 128, 1000, 4097}
// (the large ones for fewer head dims), batch·heads 1 and 40. Also: the deterministic backward is bitwise
// reproducible, close to the atomic one (bf16 and fp32) and matches naive attention (the Hopper kernel's ordered dQ);
// bf16 inputs with f32 out / gradients. fp32 runs the 3xTF32 tensor-core kernels: the 1e-4 limit on O would fail
// plain TF32 (about 1e-3), so these cases also check that the split products are there.
//
// Tagged [cuda]; every case returns with a warning when no GPU is visible (Catch2 2.13 has no SKIP).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "device_tensor.h"

#ifdef TRAINER_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda_sizes.h"
#include "flash_attn/flash.h"
#endif

namespace {

using namespace trainer;
using namespace trainer::testing;

/// Normal(0, 1) values, rounded to bf16 when dt is bf16 (the values both backends then see).
Vec random_values(std::mt19937_64& g, size_t n, DType dt) {
  std::normal_distribution<float> nd;
  Vec v(n);
  for (auto& x : v) x = dt == DType::bf16 ? bf16_bits_to_f32(f32_to_bf16_bits(nd(g))) : nd(g);
  return v;
}

/// ‖got − ref‖₂ / ‖ref‖₂ (infinity when got holds a NaN).
double rel_err(const Vec& got, const Vec& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return std::numeric_limits<double>::infinity();
    const double e = double(got[i]) - double(ref[i]);
    num += e * e;
    den += double(ref[i]) * double(ref[i]);
  }
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

/// rel_err for a logsumexp: ‖got − ref‖₂ / max(‖ref‖₂, √n). A log is compared absolutely where it is near 0 (a
/// single score of 0.01 at T 1 would otherwise turn an error of 4e-6 into 2e-4).
double lse_err(const Vec& got, const Vec& ref) {
  double den = 0;
  for (float r : ref) den += double(r) * double(r);
  const double floor = double(ref.size());
  return rel_err(got, ref) * std::sqrt((den > 0 ? den : 1.0) / std::max(den, floor));
}

/// Columns c0 .. c0+n-1 of a row-major matrix with `cols` columns.
Vec columns(const Vec& m, int64_t cols, int64_t c0, int64_t n) {
  Vec out;
  for (size_t r = 0; r < m.size() / size_t(cols); ++r)
    out.insert(out.end(), m.begin() + int64_t(r) * cols + c0, m.begin() + int64_t(r) * cols + c0 + n);
  return out;
}

uint64_t fresh_seed() {
  static std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

/// A CUDA backend with BackendOptions::deterministic (the flash backward's bitwise reproducible mode).
Backend& gpu_deterministic() {
  static std::unique_ptr<Backend> b = [] {
    BackendOptions o;
    o.deterministic = true;
    return make_backend(Device::cuda, 0, o);
  }();
  return *b;
}

/// One case: flash2 on the GPU (through Backend::attention_fwd/bwd) against naive attention on the CPU; with
/// `deterministic`, on gpu_deterministic().
void flash_case(DType dt, int B, int T, int H, int dh, bool causal, DType out_t, DType dqkv_t,
                bool deterministic = false) {
  Backend& gpu = deterministic ? gpu_deterministic() : testing::gpu();
  const uint64_t seed = fresh_seed();
  CAPTURE(dtype_name(dt), dtype_name(out_t), dtype_name(dqkv_t), B, T, H, dh, causal, deterministic, seed);
  std::mt19937_64 g(seed);
  AttnShape s;
  s.B = B, s.T = T, s.H = H, s.d_head = dh, s.causal = causal, s.scale = 1.f / std::sqrt(float(dh));
  const int64_t N = int64_t(B) * T, D = int64_t(H) * dh;
  const Vec qkv = random_values(g, size_t(N * 3 * D), dt), dout = random_values(g, size_t(N * D), dt);
  const double tol_fwd = dt == DType::bf16 ? 1e-2 : 1e-4, tol_bwd = dt == DType::bf16 ? 2e-2 : 1e-3;
  const float nan = std::numeric_limits<float>::quiet_NaN();

  // CPU reference: naive attention in fp32.
  Dev cq = make(cpu(), DType::f32, {N, 3 * D}), co = make(cpu(), DType::f32, {N, D}),
      cl = make(cpu(), DType::f32, {B, H, T}), cp = make(cpu(), DType::f32, {B, H, T, T});
  Dev cdo = make(cpu(), DType::f32, {N, D}), cdq = make(cpu(), DType::f32, {N, 3 * D});
  upload(cpu(), cq.t, qkv);
  upload(cpu(), cdo.t, dout);
  cpu().attention_fwd(AttnImpl::naive, s, co.t, cl.t, cp.t, cq.t);
  cpu().attention_bwd(AttnImpl::naive, s, cdq.t, cdo.t, cq.t, co.t, cl.t, cp.t);

  Dev gq = make(gpu, dt, {N, 3 * D}), go = make(gpu, out_t, {N, D}), gl = make(gpu, DType::f32, {B, H, T});
  Dev gdo = make(gpu, dt, {N, D}), gdq = make(gpu, dqkv_t, {N, 3 * D});
  upload(gpu, gq.t, qkv);
  upload(gpu, gdo.t, dout);
  gpu.fill(go.t, nan);
  gpu.fill(gl.t, nan);
  gpu.fill(gdq.t, nan);
  gpu.attention_fwd(AttnImpl::flash2, s, go.t, gl.t, Tensor{}, gq.t);
  gpu.attention_bwd(AttnImpl::flash2, s, gdq.t, gdo.t, gq.t, go.t, gl.t, Tensor{});

  const double eo = rel_err(download(gpu, go.t), download(cpu(), co.t));
  const double el = lse_err(download(gpu, gl.t), download(cpu(), cl.t));
  const Vec gg = download(gpu, gdq.t), cg = download(cpu(), cdq.t);
  const double eq = rel_err(columns(gg, 3 * D, 0, D), columns(cg, 3 * D, 0, D));
  const double ek = rel_err(columns(gg, 3 * D, D, D), columns(cg, 3 * D, D, D));
  const double ev = rel_err(columns(gg, 3 * D, 2 * D, D), columns(cg, 3 * D, 2 * D, D));
  CAPTURE(eo, el, eq, ek, ev);
  CHECK(eo < tol_fwd);
  CHECK(el < tol_fwd);
  CHECK(eq < tol_bwd);
  CHECK(ek < tol_bwd);
  CHECK(ev < tol_bwd);
}

}  // namespace

TEST_CASE("flash2 matches naive attention: small and ragged lengths, every head dim", "[cuda][flash]") {
  REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f32})
    for (int dh : {16, 32, 64, 80, 96, 128})
      for (bool causal : {false, true})
        for (int T : {1, 17, 100, 128}) {
          flash_case(dt, 1, T, 1, dh, causal, dt, dt);  // batch·heads 1
          flash_case(dt, 2, T, 20, dh, causal, dt, dt);  // batch·heads 40
        }
}

TEST_CASE("flash2 matches naive attention: T 1000 and 4097", "[cuda][flash]") {
  // With few (batch, head) pairs these lengths take the split paths in bf16 (the forward's key chunks and the
  // backward's split query loop: launch.cuh); 2 x 20 heads at T 1000 does not.
  REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f32})
    for (bool causal : {false, true}) {
      for (int dh : {16, 32, 64, 80, 96, 128}) flash_case(dt, 1, 1000, 1, dh, causal, dt, dt);
      flash_case(dt, 2, 1000, 20, dt == DType::bf16 ? 64 : 32, causal, dt, dt);
      flash_case(dt, 2, 1000, 3, 80, causal, dt, dt);
      flash_case(dt, 1, 4097, 1, dt == DType::bf16 ? 128 : 64, causal, dt, dt);
    }
}

#ifdef TRAINER_HAVE_CUDA
TEST_CASE("flash2 on Hopper: the wgmma kernels at shapes that take them", "[cuda][flash][sm90]") {
  // 2 x 20 heads at T 897 (d 64, 80, 96: 192-row tiles, 5 x 40, the last ragged; d 128: 128-row tiles, 8 x 40, the
  // last one row) and 2 x 140 heads at T 65 and 129 (one or two tiles, the last one holding a single key in the
  // backward's 128-key tiles and, at d 128, a single query row) give at least one forward query tile for every third
  // of 132 SMs; the boundary itself: one tile per head (T = the tile's rows) and ceil(SMs / 3) heads take the Hopper
  // forward, one head fewer does not. These take
  // the sm_90a kernels (fwd_sm90.cuh, bwd_sm90.cuh) whenever the build has them and the GPU is an H100 / H200.
  REQUIRE_GPU();
  const bool available = flash::sm90_kernels_available();
  if (!available) WARN("the Hopper kernels are not built for sm_90a or this GPU is not compute capability 9.0");
  struct Shape {
    int B, H, T;
  };
  for (int dh : {64, 80, 96, 128})
    for (bool causal : {false, true})
      for (Shape sh : {Shape{2, 20, 897}, Shape{2, 20, 1024}, Shape{2, 140, 65}, Shape{2, 140, 129}}) {
        AttnShape s;
        s.B = sh.B, s.T = sh.T, s.H = sh.H, s.d_head = dh;
        CAPTURE(dh, causal, sh.B, sh.H, sh.T);
        if (available) {
          REQUIRE(flash::uses_sm90_kernels(s, DType::bf16, false));
          REQUIRE(flash::uses_sm90_kernels(s, DType::bf16, true));
        }
        flash_case(DType::bf16, sh.B, sh.T, sh.H, dh, causal, DType::bf16, DType::bf16);
        if (sh.T == 897) flash_case(DType::bf16, sh.B, sh.T, sh.H, dh, causal, DType::f32, DType::f32);
      }
  if (!available) return;
  int dev = 0, sms = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
  for (int dh : {64, 96, 128}) {
    const int rows = dh == 128 ? 128 : 192, heads = (sms + 2) / 3;
    for (int H : {heads, heads - 1}) {
      AttnShape s;
      s.B = 1, s.T = rows, s.H = H, s.d_head = dh;
      CAPTURE(dh, H, sms);
      CHECK(flash::uses_sm90_kernels(s, DType::bf16, false) == (H == heads));
      CHECK(flash::uses_sm90_kernels(s, DType::bf16, true));
      flash_case(DType::bf16, 1, rows, H, dh, true, DType::bf16, DType::bf16);
    }
  }
}
#endif

#ifdef TRAINER_HAVE_CUDA
TEST_CASE("flash2 backward workspace: the planner's H200 sizes equal the kernels' on an H200", "[cuda][flash][planner]") {
  // backend/cuda_sizes.h restates the Hopper backward's split rule for the meta backend with the H200's SM count; on
  // a GPU with that count and the Hopper kernels both must reserve the same bytes (with or without the dK / dV
  // accumulators of the split). Shapes: the small and medium models' (no split since the fifteenth session), d 96 at
  // 4 x 8 heads (no split), one head (split), few heads at long lengths (split), xl's (no split).
  REQUIRE_GPU();
  int dev = 0, sms = 0;
  REQUIRE(cudaGetDevice(&dev) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess);
  if (!flash::sm90_kernels_available() || sms != cuda_sizes::kH200SmCount) {
    WARN("not an H200-class GPU with the Hopper kernels (" << sms << " SMs): skipped");
    return;
  }
  struct Shape {
    int B, H, T, d;
  };
  int splits = 0;
  for (Shape sh : {Shape{4, 12, 512, 64}, Shape{4, 16, 512, 64}, Shape{4, 8, 512, 96}, Shape{1, 1, 1000, 64},
                   Shape{1, 1, 16384, 128}, Shape{2, 1, 8192, 128}, Shape{2, 3, 1000, 80}, Shape{4, 32, 512, 80},
                   Shape{1, 16, 2048, 96}})
    for (bool causal : {false, true}) {
      AttnShape s;
      s.B = sh.B, s.T = sh.T, s.H = sh.H, s.d_head = sh.d, s.causal = causal;
      CAPTURE(sh.B, sh.H, sh.T, sh.d, causal);
      const size_t kernels = flash::bwd_workspace_bytes(s, DType::bf16, false);
      CHECK(cuda_sizes::flash_bwd_workspace_bytes_h200(s, DType::bf16, false) == kernels);
      CHECK(cuda_sizes::flash_bwd_workspace_bytes_h200(s, DType::bf16, true) ==
            flash::bwd_workspace_bytes(s, DType::bf16, true));
      // D, the dQ accumulators and their tile words; a split adds dK / dV's
      const size_t rows = size_t(s.B) * s.H * s.T, words = size_t(s.B) * s.H * size_t(cuda_sizes::flash_dq_tile_words_per_head(s.T));
      splits += kernels > cuda_sizes::align256(rows * 4) + cuda_sizes::align256(rows * s.d_head * 4) +
                              cuda_sizes::align256(words * 4);
    }
  CHECK(splits > 0);  // some shapes above do split
}
#endif

TEST_CASE("flash2 split paths on one head: forward key chunks, backward query chunks", "[cuda][flash][split]") {
  // Small enough for compute-sanitizer racecheck: T 600 with one (batch, head) pair splits the forward's keys
  // (bf16 d 64: 10 key tiles of 64; d 128: 19 of 32; fp32: 10 of 64 / 19 of 32) and the dK/dV pass's query loop
  // (launch.cuh, dkdv_chunk; on Hopper the wgmma backward's, 5 key tiles of 128 x 10 query tiles of 64).
  REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f32})
    for (bool causal : {false, true})
      for (int dh : {64, 80, 96, 128}) flash_case(dt, 1, 600, 1, dh, causal, dt, dt);
}

TEST_CASE("flash2 with bf16 inputs and f32 outputs or gradients", "[cuda][flash]") {
  REQUIRE_GPU();
  for (bool causal : {false, true}) {
    flash_case(DType::bf16, 2, 100, 3, 64, causal, DType::f32, DType::f32);
    flash_case(DType::bf16, 1, 129, 2, 128, causal, DType::bf16, DType::f32);
    flash_case(DType::bf16, 1, 1000, 1, 64, causal, DType::f32, DType::f32);  // the split paths, f32 stores
  }
}

#ifdef TRAINER_HAVE_CUDA
TEST_CASE("flash2 deterministic backward is bitwise reproducible and matches the atomic one", "[cuda][flash]") {
  // bf16 on an H100 / H200 takes the Hopper backward with its dQ contributions in key-tile order (bwd_sm90.cuh,
  // dq_tile_wait_turn), elsewhere and in fp32 the mma.sync kernels' dQ pass. Shapes: 2 x 3 heads at T 700 (6 key
  // tiles of 128, the last ragged) for each Hopper head dim, and 2 x 8 heads at T 4096 (32 key tiles: up to 32
  // contributions a dQ tile, 512 CTAs, several waves) where the waits would show.
  REQUIRE_GPU();
  struct Shape {
    int B, T, H, d;
  };
  for (DType dt : {DType::bf16, DType::f32})
    for (bool causal : {true, false})
      for (Shape sh : {Shape{2, 700, 3, 64}, Shape{2, 700, 3, 80}, Shape{2, 700, 3, 96}, Shape{2, 700, 3, 128},
                       Shape{2, 4096, 8, 64}, Shape{2, 4096, 8, 128}}) {
        if (dt == DType::f32 && (sh.d != 64 || sh.T > 700)) continue;  // fp32: the mma.sync kernels only
        const uint64_t seed = fresh_seed();
        CAPTURE(dtype_name(dt), causal, sh.B, sh.T, sh.H, sh.d, seed);
        std::mt19937_64 g(seed);
        AttnShape s;
        s.B = sh.B, s.T = sh.T, s.H = sh.H, s.d_head = sh.d, s.causal = causal;
        s.scale = 1.f / std::sqrt(float(sh.d));
        const int64_t N = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
        Dev q = make(gpu(), dt, {N, 3 * D}), o = make(gpu(), dt, {N, D}),
            l = make(gpu(), DType::f32, {s.B, s.H, s.T}), dO = make(gpu(), dt, {N, D});
        upload(gpu(), q.t, random_values(g, size_t(N * 3 * D), dt));
        upload(gpu(), dO.t, random_values(g, size_t(N * D), dt));
        gpu().attention_fwd(AttnImpl::flash2, s, o.t, l.t, Tensor{}, q.t);
        auto stream = static_cast<cudaStream_t>(gpu().stream());
        auto run = [&](bool det) {
          const size_t ws = flash::bwd_workspace_bytes(s, dt, det);
          Buffer w = gpu().alloc(ws, Category::workspace);
          // NaN in every f32 of the workspace: whatever the passes read must have been written by them (the Hopper
          // backward stores each dQ tile's first contribution instead of adding it to zeros)
          REQUIRE(cudaMemsetAsync(w.data(), 0xFF, ws, stream) == cudaSuccess);
          Dev dq = make(gpu(), dt, {N, 3 * D});
          gpu().fill(dq.t, std::numeric_limits<float>::quiet_NaN());
          flash::attention_bwd(s, dq.t, dO.t, q.t, o.t, l.t, w.data(), ws, det, stream);
          return download(gpu(), dq.t);
        };
        const Vec a = run(true), b = run(true), c = run(false);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        const double e = rel_err(c, a);
        CAPTURE(e);
        // The two orders differ by fp32 summation order (and, in bf16, one rounding of dQ, dK and dV).
        CHECK(e < (dt == DType::bf16 ? 1e-2 : 1e-5));
      }
}
#endif

TEST_CASE("flash2 deterministic backward matches naive attention", "[cuda][flash][deterministic]") {
  // The deterministic mode through the Backend (BackendOptions::deterministic) against the CPU's naive attention:
  // ragged lengths down to one key, one head at T 1000 and 4097 (where the atomic mode splits the Hopper backward's
  // query loop, which the deterministic mode never does), and the Hopper shapes of the case above.
  REQUIRE_GPU();
  for (bool causal : {false, true}) {
    for (int dh : {64, 80, 96, 128})
      for (int T : {1, 17, 129, 1000}) flash_case(DType::bf16, 1, T, 1, dh, causal, DType::bf16, DType::bf16, true);
    flash_case(DType::bf16, 1, 4097, 1, 128, causal, DType::bf16, DType::bf16, true);
    flash_case(DType::bf16, 2, 897, 20, 80, causal, DType::bf16, DType::bf16, true);
    flash_case(DType::bf16, 2, 897, 20, 64, causal, DType::f32, DType::f32, true);
    flash_case(DType::f32, 1, 1000, 1, 64, causal, DType::f32, DType::f32, true);  // the mma.sync dQ pass
  }
}
