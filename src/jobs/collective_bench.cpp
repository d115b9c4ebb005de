// job = "collective_bench": times all_reduce, reduce_scatter and all_gather of f32 buffers through the configured
// communicator (parallel.comm: mpi or nccl) and prints an nccl-tests style table on rank 0.
//
//   mpirun -np 4 trainer --set job=collective_bench --set device=cpu --set collective.sizes_mb=[1,10]
//   launch/collective_sweep.sh     (2, 4, 6 ranks; one combined table)
//
// Definitions (nccl-tests doc/PERFORMANCE.md):
//   size S      bytes of the whole array: the all_reduce buffer; reduce_scatter's input (= n x its output);
//               all_gather's output (= n x its input). collective.sizes_mb are MiB (2^20 B); for reduce_scatter and
//               all_gather the element count is rounded down to a multiple of the rank count n.
//   time t      per operation, averaged over collective.iters back-to-back operations after collective.warmup
//               untimed ones, measured on each rank's host clock around the loop (for nccl: up to a device sync);
//               "time" is the mean over ranks, "max" the slowest rank. The bandwidths use the slowest rank.
//   algbw       S / t, in GB/s (1e9 B/s).
//   busbw       algbw x 2(n-1)/n for all_reduce, algbw x (n-1)/n for reduce_scatter and all_gather.
//   #wrong      elements differing from a closed form after one more operation on freshly filled inputs:
//               all_reduce of (rank+1) gives n(n+1)/2; reduce_scatter of chunk c = (rank+1)(c+1) gives
//               n(n+1)/2 (r+1) on rank r; all_gather of (rank+1) gives q+1 in chunk q. Summed over ranks
//               (nccl-tests src/common.cu reduces wrongElts the same way). Any wrong element fails the job.
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "dist/bootstrap.h"
#include "dist/communicator.h"
#include "jobs/job.h"

namespace trainer {

namespace {

using nlohmann::json;

double all_ranks(Communicator& comm, double x, HostOp op) {
  comm.all_reduce_host(&x, 1, op);
  return x;
}

/// Elements of `t` (on the backend's device) different from want(i), read back in pieces of 16 Mi elements.
template <class F>
long long count_wrong(Backend& be, const Tensor& t, F want) {
  constexpr int64_t kPiece = int64_t(1) << 24;
  std::vector<float> host(size_t(std::min(kPiece, t.numel())));
  long long bad = 0;
  for (int64_t off = 0; off < t.numel(); off += kPiece) {
    const int64_t n = std::min(kPiece, t.numel() - off);
    be.copy_to_host(host.data(), t.ptr<float>() + off, size_t(n) * 4);
    for (int64_t i = 0; i < n; ++i) bad += host[size_t(i)] != want(off + i);
  }
  return bad;
}

struct Row {
  std::string op;
  int64_t bytes = 0, count = 0;  // S and its elements
  double time_us = 0, max_us = 0, algbw = 0, busbw = 0;
  long long wrong = 0;
};

/// One (op, size) point: buffers, warm-up, timed loop, closed-form check.
Row bench_one(Communicator& comm, Backend& be, const std::string& op, double size_mb, int warmup, int iters) {
  const int n = comm.size(), r = comm.rank();
  const double tri = 0.5 * n * (n + 1);
  const int64_t count = collective_elements(op, size_mb, n);
  const int64_t chunk = count / n;
  Row row{op, count * 4, count};

  Buffer a = be.alloc(size_t(count) * 4, Category::communication);
  Buffer b = be.alloc(size_t(op == "all_reduce" ? 0 : chunk) * 4, Category::communication);
  const Tensor full = a.view(DType::f32, {count});
  // reduce_scatter: in = full [count], out = first chunk of b;  all_gather: in = first chunk of b, out = full.
  const Tensor part = op == "all_reduce" ? Tensor() : b.view(DType::f32, {chunk});
  auto run_op = [&] {
    if (op == "all_reduce") comm.all_reduce(full, ReduceOp::sum);
    else if (op == "reduce_scatter") comm.reduce_scatter(part, full, ReduceOp::sum);
    else comm.all_gather(full, part);
  };
  auto fill_inputs = [&] {
    if (op == "all_reduce") {
      be.fill(full, float(r + 1));
    } else if (op == "reduce_scatter") {
      for (int c = 0; c < n; ++c) be.fill(full.slice(c * chunk, {chunk}), float((r + 1) * (c + 1)));
    } else {
      be.fill(part, float(r + 1));
    }
  };

  fill_inputs();
  for (int i = 0; i < warmup; ++i) run_op();
  be.synchronize();
  comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run_op();
  be.synchronize();  // nccl: the ops are queued on the device; mpi: already complete
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  row.time_us = all_ranks(comm, us, HostOp::sum) / n;
  row.max_us = all_ranks(comm, us, HostOp::max);

  fill_inputs();
  run_op();
  be.synchronize();
  int64_t wrong = 0;
  if (op == "all_reduce") wrong = count_wrong(be, full, [&](int64_t) { return float(tri); });
  else if (op == "reduce_scatter") wrong = count_wrong(be, part, [&](int64_t) { return float(tri * (r + 1)); });
  else wrong = count_wrong(be, full, [&](int64_t i) { return float(i / chunk + 1); });
  comm.all_reduce_host(&wrong, 1, HostOp::sum);
  row.wrong = wrong;

  const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
  row.algbw = row.max_us > 0 ? double(row.bytes) / (row.max_us * 1e-6) / 1e9 : 0.0;
  row.busbw = row.algbw * factor;
  return row;
}

}  // namespace

int64_t collective_elements(const std::string& op, double size_mb, int ranks) {
  const int64_t count = int64_t(size_mb * 1024 * 1024) / 4;  // validate: size_mb <= 2^36, so this stays in range
  return op == "all_reduce" ? count : count / ranks * ranks;
}

nlohmann::json run_collective_bench(const RunConfig& cfg, const RunContext& ctx) {
  const CollectiveCfg& cc = cfg.collective;
  const Device dev = cfg.device == "cuda" ? Device::cuda : Device::cpu;
  auto be = make_backend(dev, ctx.local_rank, backend_options(cfg));
  auto comm = make_world_communicator(cfg.parallel.comm, cfg.parallel.comm_timeout_s, *be);
  const int n = comm->size();
  spdlog::info("collective_bench on {}: comm {}, {} rank(s), ops {}, sizes {} MiB, warm-up {}, iterations {}",
               be->description(), comm->name(), n, fmt::join(cc.ops, ","), fmt::join(cc.sizes_mb, ","), cc.warmup,
               cc.iters);

  json rows = json::array();
  long long wrong_total = 0;
  for (const std::string& op : cc.ops) {
    if (ctx.rank == 0) {
      std::printf("# collective_bench  op %s  dtype %s  comm %s  nranks %d  warmup %d  iters %d  (%s)\n", op.c_str(),
                  cc.dtype.c_str(), comm->name().c_str(), n, cc.warmup, cc.iters, be->description().c_str());
      std::printf("# %12s %12s %10s %10s %9s %9s %7s\n", "size", "count", "time", "max", "algbw", "busbw", "#wrong");
      std::printf("# %12s %12s %10s %10s %9s %9s %7s\n", "(B)", "(elements)", "(us)", "(us)", "(GB/s)", "(GB/s)", "");
    }
    double big_busbw = 0;
    int big = 0;
    long long op_wrong = 0;
    for (double mb : cc.sizes_mb) {
      const Row row = bench_one(*comm, *be, op, mb, cc.warmup, cc.iters);
      op_wrong += row.wrong;
      if (row.bytes >= (int64_t(64) << 20)) big_busbw += row.busbw, ++big;
      if (ctx.rank == 0) {
        std::printf("  %12lld %12lld %10.1f %10.1f %9.2f %9.2f %7lld\n", (long long)row.bytes, (long long)row.count,
                    row.time_us, row.max_us, row.algbw, row.busbw, row.wrong);
        std::fflush(stdout);
      }
      rows.push_back({{"op", row.op}, {"size_bytes", row.bytes}, {"count", row.count}, {"time_us", row.time_us},
                      {"time_us_max", row.max_us}, {"algbw_gbs", row.algbw}, {"busbw_gbs", row.busbw},
                      {"wrong", row.wrong}});
    }
    wrong_total += op_wrong;
    if (ctx.rank == 0) {
      if (big > 0)
        std::printf("# avg busbw (size >= 64 MiB): %.2f GB/s   wrong: %lld  %s\n\n", big_busbw / big, op_wrong,
                    op_wrong ? "FAILED" : "OK");
      else
        std::printf("# wrong: %lld  %s\n\n", op_wrong, op_wrong ? "FAILED" : "OK");
      std::fflush(stdout);
    }
  }
  if (wrong_total > 0)
    throw RuntimeError(fmt::format("collective_bench: {} wrong elements over all ranks (see the table)", wrong_total));
  json r;
  r["collective_bench"] = {{"comm", comm->name()},  {"nranks", n},        {"dtype", cc.dtype},
                           {"warmup", cc.warmup},    {"iters", cc.iters},  {"results", rows},
                           {"definitions", "size: bytes of the whole array (nccl-tests); time: per op, mean over "
                                           "ranks (time_us) and slowest rank (time_us_max); algbw = size / "
                                           "time_us_max in GB/s (1e9); busbw per nccl-tests PERFORMANCE.md"}};
  r["backend"] = be->description();
  return r;
}

}  // namespace trainer
