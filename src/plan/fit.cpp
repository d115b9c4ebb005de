#include "plan/fit.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>

#include "core/errors.h"
#include "model/activations.h"
#include "plan/planner.h"

namespace trainer {

namespace {

struct Planned {
  size_t peak = 0;
  double time_s = 0;
  size_t state = 0;  // weights, gradients and optimizer state at their category peaks
};

class Searcher {
 public:
  Searcher(int world, size_t budget, std::string gpu) : world_(world), budget_(budget), gpu_(std::move(gpu)) {}

  /// The plan of `c` (the largest peak of rank 0 and the last rank: zero1 and fsdp pad the last shard), or nothing
  /// when the train job would refuse it.
  std::optional<Planned> plan(const RunConfig& c) {
    try {
      Planned p;
      for (int r : {0, world_ - 1}) {
        add(p, make_plan(c, world_, r, gpu_));
        if (world_ == 1) break;
      }
      return p;
    } catch (const ConfigError&) {
      return std::nullopt;
    }
  }
  /// The same from plans made already (the caller's, of the run as configured; counted as dry runs).
  Planned planned(const std::vector<Plan>& made) {
    Planned p;
    for (const Plan& q : made) add(p, q);
    return p;
  }
  bool fits(const std::optional<Planned>& p) const { return p && p->peak <= budget_; }

  /// The fewest k in [0, L] for which make(k) fits (bisection; the peak does not grow with k), with its plan.
  std::optional<std::pair<int, Planned>> fewest(int L, const std::function<RunConfig(int)>& make) {
    const std::optional<Planned> at_0 = plan(make(0));
    if (fits(at_0)) return std::pair(0, *at_0);
    std::optional<Planned> at_l = plan(make(L));
    // keep_attention with naive attention: every block's kept probabilities can make k = L the larger peak (the
    // only place the peak grows with k), so L - 1 gets its own look
    if (!fits(at_l) && L > 1) at_l = plan(make(--L));
    if (!fits(at_l)) return std::nullopt;
    int lo = 0, hi = L;  // make(lo) does not fit, make(hi) fits
    Planned best = *at_l;
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      const std::optional<Planned> p = plan(make(mid));
      if (fits(p)) {
        hi = mid;
        best = *p;
      } else {
        lo = mid;
      }
    }
    return std::pair(hi, best);
  }

  int plans() const { return plans_; }

 private:
  void add(Planned& p, const Plan& q) {
    ++plans_;
    const auto& cp = q.category_peaks;
    p.peak = std::max(p.peak, q.peak_bytes);
    p.time_s = std::max(p.time_s, q.time_s);
    p.state = std::max(p.state, cp[size_t(Category::parameters)] + cp[size_t(Category::gradients)] +
                                    cp[size_t(Category::optimizer)]);
  }

  int world_;
  size_t budget_;
  std::string gpu_;  // make_plan's target GPU
  int plans_ = 0;
};

/// Blocks 0 .. k-1 (checkpointing.blocks).
std::vector<int> first_blocks(int k) {
  std::vector<int> b(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) b[size_t(i)] = i;
  return b;
}

}  // namespace

FitSearch search_fit(const RunConfig& cfg, int world_size, size_t budget_bytes, const std::string& gpu,
                     const std::vector<Plan>& configured) {
  TRAINER_CHECK(cfg.job == "train" && world_size >= 1, "search_fit: a train config on >= 1 rank");
  FitSearch out;
  out.budget_bytes = budget_bytes;
  Searcher s(world_size, budget_bytes, gpu);
  const int L = cfg.model.num_layers;
  const int per_rank = cfg.data.batch_size / world_size;
  // The run as configured, and its state (weights, gradients, AdamW state), which no activation setting lowers
  const std::optional<Planned> as_is = configured.empty() ? s.plan(cfg) : s.planned(configured);
  TRAINER_CHECK(as_is.has_value(), "search_fit: the run's own config has no plan");
  out.state_bytes = as_is->state;
  // A run of several microbatches a step keeps gradient accumulators that one microbatch (the rank's whole batch)
  // does not need: where the state is over the budget at the run's microbatch, the search also tries that one
  const bool try_whole = per_rank > cfg.data.microbatch_size && as_is->state > budget_bytes;
  if (try_whole) {
    RunConfig whole = cfg;
    whole.data.microbatch_size = per_rank;
    if (const std::optional<Planned> p = s.plan(whole)) out.state_bytes = std::min(out.state_bytes, p->state);
  }
  // Each family's fastest fitting option over the microbatches, from the run's down to one row (halving): a
  // smaller microbatch adds accumulation steps but may need fewer recomputed blocks
  struct Candidate {
    FitOption option;
    RunConfig cfg;  // what option.sets make of the run's config
  };
  std::map<std::string, Candidate> best;
  auto consider = [&](const std::string& family, FitOption o, const RunConfig& c) {
    auto it = best.find(family);
    if (it == best.end() || o.time_s < it->second.option.time_s) best[family] = {std::move(o), c};
  };
  if (s.fits(as_is)) consider("as configured", {{}, "as configured", as_is->peak, as_is->time_s}, cfg);
  if (out.state_bytes <= budget_bytes) {
    const bool backward = phase_has_backward(cfg.bench);  // a forward keeps nothing for a backward: no recompute
    std::vector<int> micros;  // the run's microbatch and each halving of it (and the whole batch, above)
    if (try_whole) micros.push_back(per_rank);
    for (int micro = cfg.data.microbatch_size; micro >= 1; micro = micro > 1 ? std::max(1, micro / 2) : 0)
      micros.push_back(micro);
    for (const int micro : micros) {
      if (per_rank % micro != 0) continue;  // the train job needs the per-rank batch divisible
      RunConfig base = cfg;
      base.data.microbatch_size = micro;
      std::vector<std::string> micro_set;
      std::string micro_what;
      if (micro != cfg.data.microbatch_size) {
        micro_set.push_back(fmt::format("data.microbatch_size={}", micro));
        micro_what = fmt::format(", microbatch {} ({} per step)", micro, per_rank / micro);
      }
      auto add = [&](const std::string& family, std::vector<std::string> sets, const std::string& what,
                     const Planned& p, const RunConfig& c) {
        sets.insert(sets.end(), micro_set.begin(), micro_set.end());
        consider(family, {std::move(sets), what + micro_what, p.peak, p.time_s}, c);
      };
      if (!backward) {
        if (micro != cfg.data.microbatch_size) {
          const std::optional<Planned> p = s.plan(base);
          if (s.fits(p)) add("microbatch", {}, "as configured", *p, base);
        }
        continue;
      }
      for (const bool keep_attention : {false, true}) {
        const auto make = [&](int k) {
          RunConfig c = base;
          c.checkpointing.policy = "full";
          c.checkpointing.blocks = first_blocks(k);
          c.checkpointing.keep_attention = keep_attention;
          return c;
        };
        const auto found = s.fewest(L, make);
        if (!found) continue;
        const auto [k, p] = *found;
        if (k == 0) {  // no block recomputed (selective: RMSNorm and SwiGLU outputs recomputed in the backward)
          if (!keep_attention) {
            RunConfig c = base;
            c.checkpointing.policy = "selective";
            c.checkpointing.blocks.reset();
            add("selective", {"checkpointing.policy=selective", "checkpointing.blocks=null"},
                "no block recomputed (selective)", p, c);
          }
          continue;
        }
        std::vector<std::string> sets = {"checkpointing.policy=full",
                                         fmt::format("checkpointing.blocks=[{}]", fmt::join(first_blocks(k), ","))};
        sets.push_back(fmt::format("checkpointing.keep_attention={}", keep_attention));
        add(keep_attention ? "blocks, attention kept" : "blocks", sets,
            fmt::format("{} of {} blocks recomputed{}", k, L, keep_attention ? ", attention kept" : ""), p, make(k));
      }
      // none: nothing recomputed, the fastest where it fits (the elementwise results kept too); sqrt, nested: the
      // fewest inputs kept
      for (const char* policy : {"none", "sqrt", "nested"}) {
        RunConfig c = base;
        c.checkpointing.policy = policy;
        c.checkpointing.blocks.reset();
        c.checkpointing.keep_attention = false;
        const std::optional<Planned> p = s.plan(c);
        if (!s.fits(p)) continue;
        add(policy,
            {fmt::format("checkpointing.policy={}", policy), "checkpointing.blocks=null",
             "checkpointing.keep_attention=false"},
            c.checkpointing.policy == "none" ? "nothing recomputed (policy none)" : fmt::format("policy {}", policy),
            *p, c);
      }
    }
  }
  // The LM head's chunk: each chunk after the first reads and writes the head's fp32 weight gradient once more, so
  // fewer, larger chunks are faster where their buffers fit. For each option, the largest chunk that fits: the
  // microbatch's tokens, then halvings down to the chunk it has (lm_head_chunk_rows), the first fit kept if faster.
  if (phase_has_backward(cfg.bench))
    for (auto& [family, e] : best) {
      const RunConfig& c = e.cfg;
      const int64_t tokens = int64_t(c.data.microbatch_size) * c.model.context_length;
      const int64_t has = lm_head_chunk_rows(tokens, c.model.vocab_size, c.model.d_model,
                                             bf16_precision(c.precision) ? DType::bf16 : DType::f32,
                                             c.checkpointing.lm_head_chunk_tokens);
      for (int64_t chunk = tokens; chunk > has && chunk <= INT_MAX; chunk = (chunk + 1) / 2) {
        RunConfig t = c;
        t.checkpointing.lm_head_chunk_tokens = int(chunk);
        const std::optional<Planned> p = s.plan(t);
        if (!s.fits(p)) continue;
        if (p->time_s < e.option.time_s) {
          e.option.sets.push_back(fmt::format("checkpointing.lm_head_chunk_tokens={}", chunk));
          e.option.what += chunk == tokens ? ", LM head whole" : fmt::format(", LM head in chunks of {}", chunk);
          e.option.peak_bytes = p->peak;
          e.option.time_s = p->time_s;
        }
        break;
      }
    }
  for (auto& [family, e] : best) {
    e.option.as_configured = family == "as configured";
    out.options.push_back(std::move(e.option));
  }
  std::stable_sort(out.options.begin(), out.options.end(), [](const FitOption& a, const FitOption& b) {
    return a.time_s != b.time_s ? a.time_s < b.time_s : a.sets.size() < b.sets.size();
  });
  // An option that another one beats in both time and peak (or ties in both: the same plan twice, a forward's
  // policies, say) is left out; the first of a tie, with the fewest --set arguments, stays. The run as configured
  // stays listed even so, beside what beats it. In time order, an option is kept where its peak is below that of
  // every option kept before it (each at least as fast).
  std::vector<FitOption> kept;
  size_t lowest = SIZE_MAX;
  for (FitOption& o : out.options) {
    const bool tie = !kept.empty() && o.peak_bytes == kept.back().peak_bytes && o.time_s == kept.back().time_s;
    if (o.peak_bytes >= lowest && (!o.as_configured || tie)) {
      out.beaten.push_back(std::move(o));
      continue;
    }
    lowest = std::min(lowest, o.peak_bytes);
    kept.push_back(std::move(o));
  }
  out.options = std::move(kept);
  out.plans = s.plans();
  return out;
}

nlohmann::json FitSearch::to_json() const {
  const auto list = [](const std::vector<FitOption>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const FitOption& o : v)
      a.push_back({{"sets", o.sets}, {"what", o.what}, {"peak_bytes", o.peak_bytes}, {"time_s", o.time_s}});
    return a;
  };
  return {{"budget_bytes", budget_bytes}, {"options", list(options)}, {"beaten", list(beaten)}, {"plans", plans},
          {"state_bytes", state_bytes}};
}

}  // namespace trainer
