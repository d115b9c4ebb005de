// What makes a train run fit its memory: a search over activation checkpointing and the microbatch with the planner
// (plan/planner.h), for `trainer --plan` when the peak is above kFitFraction of the memory, or with `--fit`.
//
// Every candidate is the run's own config with a few checkpointing / data keys changed, planned by the dry run, so
// a candidate's peak and step time are exactly what --plan would print for it. The candidates, for L blocks:
//   - policy full on the first k blocks (the others keep what selective keeps), the fewest k that fits: each
//     recomputed block trades its stored activations for one more block forward (Korthikanti et al. 2022 recompute
//     whole blocks selectively; the 8B configs were found this way by hand);
//   - the same with checkpointing.keep_attention (a recompute skips the attention forward; more memory);
//   - policy nested and sqrt (Chen et al. 2016: O(log L) and O(sqrt L) inputs alive);
//   - policy none, nothing recomputed: the fastest where it fits (selective's RMSNorm and SwiGLU recompute is about
//     1-2% of a step: results/NOTES.md v52), so --fit of a run that fits also says what keeping everything costs;
//   - each of these at the run's microbatch, half of it, a quarter, ... down to one row (gradient accumulation: the
//     same update up to summation order; a smaller microbatch may need fewer recomputed blocks), the fastest kept;
//     where the run's state is over the budget at its microbatch, also at the rank's whole batch as one microbatch
//     (no gradient accumulators; a larger microbatch is not tried otherwise: the plan's cost grows with its rows);
//   - the run as configured, when it fits; a forward-only run (bench.phase forward) only varies the microbatch;
//   - then, for each option, the largest LM-head chunk (checkpointing.lm_head_chunk_tokens) that still fits, where
//     that is faster: each chunk after the first reads and writes the head's fp32 weight gradient once more (tried
//     from the microbatch's tokens down by halving to the option's own chunk; the first that fits is kept);
//   - an option that another beats in both time and peak is left out (the run as configured stays listed).
// Each family's k is the fewest at the run's LM-head chunk, so a larger chunk with a k one or two lower can be faster
// still and is not found (the 8B fsdp config: results/NOTES.md v52).
// The peak is taken as monotone in k (each more recomputed block drops its stored activations), so k is found by
// bisection: about log2(L) plans per family and microbatch. With naive attention and keep_attention the kept
// probabilities can make k = L a larger peak than k = L - 1, so L - 1 is tried when L does not fit.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "config/config.h"
#include "plan/planner.h"  // kFitFraction

namespace trainer {

/// One way to make the run fit.
struct FitOption {
  std::vector<std::string> sets;  // --set arguments (key=value) to add to the run's command line
  std::string what;               // "9 of 34 blocks recomputed, attention kept", ...
  size_t peak_bytes = 0;          // the plan's peak of the largest rank planned (rank 0 and the last rank)
  double time_s = 0;              // the plan's predicted step time
  bool as_configured = false;     // the run's own config (with at most a larger LM-head chunk): listed even if beaten
};

struct FitSearch {
  size_t budget_bytes = 0;         // what a rank's planned peak may be
  std::vector<FitOption> options;  // those that fit, fastest first: the run as configured (when it fits) and each
                                   // family's fastest over the microbatches that no other beats in time and peak
  std::vector<FitOption> beaten;   // the families' fits that an option above beats in time and peak (or ties), in
                                   // time order: in the JSON only
  int plans = 0;                   // dry runs made
  size_t state_bytes = 0;          // the run's weights, gradients and optimizer state at their peaks (the largest
                                   // rank; the lower of its microbatch's and one microbatch's): when they exceed the
                                   // budget no candidate is tried (recompute cannot help)
  /// {"budget_bytes", "options": [{"sets", "what", "peak_bytes", "time_s"}], "beaten": [the same], "plans",
  ///  "state_bytes"}
  nlohmann::json to_json() const;
};


/// Searches the candidates above for `cfg` (resolved; job train) on `world_size` ranks against `budget_bytes` per
/// rank, timed at `gpu`'s rates (make_plan). Candidates the train job would refuse are skipped. Returns the fitting
/// ones, fastest first. `configured`: the plans of `cfg` itself made already (make_plan(cfg, world_size, r, gpu) for
/// rank 0, the last rank and any others), so that the run as configured is not planned again; empty: planned here.
FitSearch search_fit(const RunConfig& cfg, int world_size, size_t budget_bytes, const std::string& gpu = "h200",
                     const std::vector<Plan>& configured = {});

}  // namespace trainer
