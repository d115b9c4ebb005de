// job = "attention_bench": naive (materialised scores) against FlashAttention-2 attention on one device, over the two
// grids of the course's attention benchmarks (CS336 assignment 2, sections 1.2.1 "pytorch_attention" and the
// FlashAttention-2 leaderboard benchmark):
//   (a) batch 8, one head ("no multi-head"), no mask, d_head {16, 32, 64, 128} x seq {256, 1024, 4096, 8192, 16384},
//       in the run's precision: forward and backward times and the memory in use before the backward;
//   (b) batch 1, one head, causal, seq 128 .. 65536 (powers of two) x d_head {16, 32, 64, 128}, in bf16 and fp32:
//       forward, backward and forward+backward latency.
// Each point runs through Backend::attention_fwd / attention_bwd with AttnImpl::naive or ::flash2 on qkv [B*T, 3D]
// filled with random normal values (never zeros), each point on a fresh backend. Times are medians over `iters` runs of one op, each between two
// device events, after `warmup` untimed runs. "mem_before_bwd" is the backend's bytes in use after the forward with
// everything the backward needs (qkv, out, lse, and probs for naive), before dout/dqkv exist; "peak" is the highest
// total during the point. A point whose allocation fails is a row with status "oom" (never a crash); the job goes on.
// bf16 points need the CUDA backend; on the CPU backend they are skipped.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "jobs/attention_bench.h"
#include "jobs/job.h"
#include "plan/host_memory.h"

namespace trainer {

AttentionBenchOptions attention_bench_options(const RunConfig& cfg) {
  AttentionBenchOptions o;
  o.warmup = std::max(0, cfg.bench.warmup_steps);
  o.iters = std::max(1, cfg.bench.measure_steps);  // (validate_config: >= 1)
  o.dtype_a = bf16_precision(cfg.precision) ? DType::bf16 : DType::f32;
  o.grids = cfg.attention_bench.grids;
  o.impls.clear();
  for (const std::string& i : cfg.attention_bench.impls)
    o.impls.push_back(i == "naive" ? AttnImpl::naive : AttnImpl::flash2);
  o.max_seq = cfg.attention_bench.max_seq;
  return o;
}

namespace {

using nlohmann::json;

struct Point {
  std::string grid;
  AttnImpl impl = AttnImpl::naive;
  DType dtype = DType::f32;
  int B = 1, T = 1, H = 1, d = 16;
  bool causal = false;
};

struct Result {
  std::string status = "ok";  // ok | oom | skipped
  std::string error;
  double fwd_ms = 0, bwd_ms = 0, fwdbwd_ms = 0;
  size_t mem_before_bwd = 0, peak = 0;
};

const char* impl_name(AttnImpl i) { return i == AttnImpl::naive ? "naive" : "flash2"; }

/// Median of `iters` event-timed runs of f after `warmup` untimed ones (ms).
template <class F>
double median_ms(Backend& be, int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  auto e0 = be.make_event(), e1 = be.make_event();
  std::vector<double> ts;
  for (int i = 0; i < iters; ++i) {
    be.record(*e0);
    f();
    be.record(*e1);
    ts.push_back(be.elapsed_ms(*e0, *e1));
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

/// Random normal values, generated once on the host (f32, and rounded to bf16) and uploaded.
class RandomSource {
 public:
  void fill(Backend& be, const Tensor& t) {
    const size_t n = size_t(t.numel());
    if (f32_.size() < n) {
      std::mt19937 g(1234 + unsigned(f32_.size()));
      std::normal_distribution<float> nd;
      const size_t old = f32_.size();
      f32_.resize(n);
      bf16_.resize(n);
      for (size_t i = old; i < n; ++i) {
        f32_[i] = nd(g);
        uint32_t u;
        std::memcpy(&u, &f32_[i], 4);
        bf16_[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
      }
    }
    if (t.dtype == DType::f32)
      be.copy_from_host(t.data, f32_.data(), n * 4);
    else
      be.copy_from_host(t.data, bf16_.data(), n * 2);
  }

 private:
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
};

/// One point on a fresh backend (so that scratch memory grown by an earlier point does not count here).
Result run_point(Device dev, const RunContext& ctx, const BackendOptions& bopts, RandomSource& rnd, const Point& p,
                 const AttentionBenchOptions& o) {
  Result r;
  auto be_owner = make_backend(dev, ctx.local_rank, bopts);
  Backend& be = *be_owner;
  if (p.dtype == DType::bf16 && be.device() != Device::cuda) {
    r.status = "skipped";
    r.error = "bf16 needs the CUDA backend";
    return r;
  }
  AttnShape s;
  s.B = p.B, s.T = p.T, s.H = p.H, s.d_head = p.d, s.causal = p.causal, s.scale = 1.f / std::sqrt(float(p.d));
  const int64_t N = int64_t(p.B) * p.T, D = int64_t(p.H) * p.d;
  if (be.device() == Device::cpu) {  // host memory: a point past what is available is an oom row, not a killed job
    const double e = double(dtype_size(p.dtype));
    // qkv, out, dout, dqkv (8 N D), lse; naive: the probabilities and its backward's dS scratch of one (b, h)
    const double need = e * double(N) * double(D) * 8 + 4.0 * p.B * p.H * p.T +
                        (p.impl == AttnImpl::naive ? e * double(p.T) * p.T * (double(p.B) * p.H + 1) : 0.0);
    const size_t avail = host_memory_available();
    if (avail > 0 && need > 0.9 * double(avail)) {
      r.status = "oom";
      r.error = fmt::format("not run: it needs {:.2f} GiB of host memory, {:.2f} GiB is available (MemAvailable)",
                            need / double(1 << 30), double(avail) / double(1 << 30));
      return r;
    }
  }
  be.synchronize();
  be.memory().reset_peak();
  try {
    Buffer qkv_b = be.alloc(size_t(N * 3 * D) * dtype_size(p.dtype), Category::activations);
    Buffer out_b = be.alloc(size_t(N * D) * dtype_size(p.dtype), Category::activations);
    Buffer lse_b = be.alloc(size_t(int64_t(p.B) * p.H * p.T) * 4, Category::activations);
    Buffer probs_b;
    const Tensor qkv = qkv_b.view(p.dtype, {N, 3 * D}), out = out_b.view(p.dtype, {N, D}),
                 lse = lse_b.view(DType::f32, {p.B, p.H, p.T});
    Tensor probs;
    if (p.impl == AttnImpl::naive) {
      probs_b = be.alloc(size_t(int64_t(p.B) * p.H * p.T * p.T) * dtype_size(p.dtype), Category::activations);
      probs = probs_b.view(p.dtype, {p.B, p.H, p.T, p.T});
    }
    rnd.fill(be, qkv);
    auto fwd = [&] { be.attention_fwd(p.impl, s, out, lse, probs, qkv); };
    r.fwd_ms = median_ms(be, o.warmup, o.iters, fwd);
    be.synchronize();
    r.mem_before_bwd = be.memory().total;

    Buffer dout_b = be.alloc(size_t(N * D) * dtype_size(p.dtype), Category::activations);
    Buffer dqkv_b = be.alloc(size_t(N * 3 * D) * dtype_size(p.dtype), Category::activations);
    const Tensor dout = dout_b.view(p.dtype, {N, D}), dqkv = dqkv_b.view(p.dtype, {N, 3 * D});
    rnd.fill(be, dout);
    auto bwd = [&] { be.attention_bwd(p.impl, s, dqkv, dout, qkv, out, lse, probs); };
    r.bwd_ms = median_ms(be, o.warmup, o.iters, bwd);
    r.fwdbwd_ms = median_ms(be, o.warmup, o.iters, [&] {
      fwd();
      bwd();
    });
    be.synchronize();
  } catch (const OutOfMemory& e) {
    be.synchronize();
    r = Result{};
    r.status = "oom";
    r.error = e.what();
  }
  r.peak = be.memory().peak_total;
  return r;
}

json to_json(const Point& p, const Result& r) {
  json j = {{"grid", p.grid},     {"impl", impl_name(p.impl)}, {"dtype", dtype_name(p.dtype)},
            {"batch", p.B},       {"heads", p.H},              {"seq", p.T},
            {"d_head", p.d},      {"causal", p.causal},        {"status", r.status}};
  if (r.status == "ok") {
    j["forward_ms"] = r.fwd_ms;
    j["backward_ms"] = r.bwd_ms;
    j["forward_backward_ms"] = r.fwdbwd_ms;
    j["mem_before_backward_bytes"] = r.mem_before_bwd;
    j["peak_bytes"] = r.peak;
  } else {
    j["error"] = r.error;
  }
  return j;
}

void print_row(const Point& p, const Result& r) {
  if (r.status != "ok") {
    std::printf("  %-6s %-4s %6d %7d  %-6s %10s\n", dtype_name(p.dtype), p.grid.c_str(), p.d, p.T, impl_name(p.impl),
                r.status == "oom" ? "OOM" : r.status.c_str());
  } else {
    std::printf("  %-6s %-4s %6d %7d  %-6s %10.3f %10.3f %10.3f %12.1f %10.1f\n", dtype_name(p.dtype), p.grid.c_str(),
                p.d, p.T, impl_name(p.impl), r.fwd_ms, r.bwd_ms, r.fwdbwd_ms, double(r.mem_before_bwd) / (1 << 20),
                double(r.peak) / (1 << 20));
  }
  std::fflush(stdout);
}

}  // namespace

nlohmann::json run_attention_bench(const RunConfig& cfg, const RunContext& ctx) {
  return run_attention_bench(cfg, ctx, attention_bench_options(cfg));
}

nlohmann::json run_attention_bench(const RunConfig& cfg, const RunContext& ctx, const AttentionBenchOptions& o) {
  const Device dev = cfg.device == "cuda" ? Device::cuda : Device::cpu;
  const BackendOptions bopts = backend_options(cfg);
  const std::string description = make_backend(dev, ctx.local_rank, bopts)->description();
  spdlog::info("attention_bench on {}: grids {}, warm-up {}, iterations {}", description, o.grids.size(),
               o.warmup, o.iters);

  std::vector<Point> points;
  for (const std::string& g : o.grids) {
    if (g == "a") {
      for (int d : {16, 32, 64, 128})
        for (int T : {256, 1024, 4096, 8192, 16384})
          for (AttnImpl impl : o.impls)
            if (T <= o.max_seq) points.push_back({"a", impl, o.dtype_a, 8, T, 1, d, false});
    } else if (g == "b") {
      for (DType dt : {DType::bf16, DType::f32})
        for (int d : {16, 32, 64, 128})
          for (int T = 128; T <= o.max_seq; T *= 2)
            for (AttnImpl impl : o.impls) points.push_back({"b", impl, dt, 1, T, 1, d, true});
    } else {
      throw ConfigError(fmt::format("attention_bench: unknown grid '{}' (a | b)", g));
    }
  }

  if (ctx.rank == 0) {
    std::printf("# attention_bench (%s): grid a = batch 8, 1 head, no mask; grid b = batch 1, 1 head, causal\n",
                description.c_str());
    std::printf("  %-6s %-4s %6s %7s  %-6s %10s %10s %10s %12s %10s\n", "dtype", "grid", "d_head", "seq", "impl",
                "fwd_ms", "bwd_ms", "f+b_ms", "mem_bwd_MiB", "peak_MiB");
  }
  RandomSource rnd;
  json rows = json::array();
  int skipped = 0;  // bf16 points on the cpu: rows of the record, one line of the table
  for (const Point& p : points) {
    const Result r = run_point(dev, ctx, bopts, rnd, p, o);
    skipped += r.status == "skipped";
    if (ctx.rank == 0 && r.status != "skipped") print_row(p, r);
    rows.push_back(to_json(p, r));
  }
  if (ctx.rank == 0 && skipped > 0)
    std::printf("  (%d bf16 point(s) skipped: bf16 needs the CUDA backend; they are rows with status skipped in the "
                "record)\n", skipped);
  json res;
  res["gemm_autotune"] = gemm_autotune_record(cfg, nullptr);  // one backend per point: no totals
  res["attention_bench"] = {{"warmup", o.warmup},
                            {"iters", o.iters},
                            {"rows", rows},
                            {"definitions",
                             "times: median over iters of one op between device events (ms); "
                             "mem_before_backward_bytes: backend bytes in use after the forward (qkv, out, lse, probs "
                             "for naive); peak_bytes: highest total during the point; status oom: an allocation "
                             "failed"}};
  res["backend"] = description;
  return res;
}

}  // namespace trainer
