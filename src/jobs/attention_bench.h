// job = "attention_bench" (src/jobs/attention_bench.cpp): naive against FlashAttention-2 attention over the course's
// two benchmark grids. run_attention_bench(cfg, ctx) is the job entry (declared in jobs/job.h); this header adds the
// options and the entry that takes them explicitly (for a sub-grid, tests and quick runs).
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "config/config.h"

namespace trainer {

struct RunContext;

struct AttentionBenchOptions {
  std::vector<std::string> grids{"a", "b"};                       // a: batch 8, no mask; b: batch 1, causal
  std::vector<AttnImpl> impls{AttnImpl::naive, AttnImpl::flash2};
  int max_seq = 65536;          // no point with a longer sequence (grid b goes 128 .. max_seq)
  int warmup = 2, iters = 10;   // untimed and timed runs of each op
  DType dtype_a = DType::f32;   // grid (a) precision (grid b runs bf16 and f32)
};

/// Options from the run config: bench.warmup_steps, bench.measure_steps, precision (grid a), attention_bench.*.
AttentionBenchOptions attention_bench_options(const RunConfig& cfg);

nlohmann::json run_attention_bench(const RunConfig& cfg, const RunContext& ctx);

/// As run_attention_bench(cfg, ctx) with explicit options (cfg gives device, fp32_matmul and profile.nvtx).
/// Raises ConfigError for an unknown grid name.
nlohmann::json run_attention_bench(const RunConfig& cfg, const RunContext& ctx, const AttentionBenchOptions& o);

}  // namespace trainer
