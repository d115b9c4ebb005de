// fsdp's buffer classes: see fsdp_buffers.h.
#include "parallel/fsdp_buffers.h"

#include <algorithm>
#include <functional>

#include "core/errors.h"

namespace trainer {

namespace {

/// The unit each gather of `uses` gathers, in gather order.
std::vector<int> gathered_units(const std::vector<UnitUse>& uses) {
  const std::vector<int> g = gather_of_uses(uses);
  std::vector<int> units;
  for (size_t i = 0; i < uses.size(); ++i)
    if (g[i] >= 0 && size_t(g[i]) == units.size()) units.push_back(uses[i].unit);
  return units;
}

}  // namespace

size_t FsdpBuffers::bytes(size_t gather_bytes) const {
  size_t b = 0;
  for (int c = 0; c < 2; ++c)
    b += size_t(elems(c)) * (size_t(gathers[c]) * gather_bytes + size_t(staging[c]) * 4);
  return b;
}

std::vector<int> gather_of_uses(const std::vector<UnitUse>& uses) {
  std::vector<int> g(uses.size(), -1);
  int n = 0;
  for (size_t i = 0; i < uses.size(); ++i) {
    if (!uses[i].weights) continue;
    const bool shared = i > 0 && g[i - 1] >= 0 && uses[i - 1].unit == uses[i].unit;
    g[i] = shared ? g[i - 1] : n++;
  }
  return g;
}

FsdpBuffers plan_fsdp_buffers(const std::vector<int64_t>& padded, const std::vector<std::vector<UnitUse>>& schedules,
                              int prefetch_layers, size_t gather_bytes) {
  TRAINER_CHECK(!padded.empty() && !schedules.empty() && prefetch_layers >= 0, "fsdp buffers: {} units, {} schedules",
                padded.size(), schedules.size());
  FsdpBuffers best;
  best.largest = *std::max_element(padded.begin(), padded.end());
  // No more gathers ahead than the run's microbatch has (more would stay unused).
  best.distance = int(std::clamp<int64_t>(int64_t(gathered_units(schedules[0]).size()), 1,
                                          int64_t(prefetch_layers) + 1));
  std::vector<int64_t> splits = padded;
  std::sort(splits.begin(), splits.end(), std::greater<>());  // the largest first: one class wins ties
  splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
  bool first = true;
  for (int64_t split : splits) {
    FsdpBuffers b = best;
    b.split = split;
    b.gathers[0] = b.gathers[1] = b.staging[0] = b.staging[1] = 0;
    for (const std::vector<UnitUse>& uses : schedules) {
      const std::vector<int> units = gathered_units(uses);
      int in_window[2] = {0, 0};  // gathers of each class among the last `distance` ones
      for (size_t j = 0; j < units.size(); ++j) {
        ++in_window[b.klass(padded[size_t(units[j])])];
        if (j >= size_t(b.distance)) --in_window[b.klass(padded[size_t(units[j - size_t(b.distance)])])];
        for (int c = 0; c < 2; ++c) b.gathers[c] = std::max(b.gathers[c], in_window[c]);
      }
      int prev = -1;  // the class of the previous gradient-reading use
      for (const UnitUse& u : uses) {
        if (!writes_grads(u.pass)) continue;
        const int c = b.klass(padded[size_t(u.unit)]);
        b.staging[c] = std::max(b.staging[c], prev == c ? 2 : 1);
        prev = c;
      }
    }
    if (first || b.bytes(gather_bytes) < best.bytes(gather_bytes)) best = b;
    first = false;
  }
  return best;
}

std::vector<int> fsdp_gather_slots(const FsdpBuffers& b, const std::vector<int64_t>& padded,
                                   const std::vector<UnitUse>& uses) {
  for (const UnitUse& u : uses) {
    TRAINER_CHECK(u.unit >= 0 && size_t(u.unit) < padded.size(), "fsdp: schedule names unit {} of {}", u.unit,
                  padded.size());
    TRAINER_CHECK(!writes_grads(u.pass) || b.staging[b.klass(padded[size_t(u.unit)])] > 0,
                  "fsdp: a {} use of unit {} has no staging buffer of its size class: the schedule is not one the "
                  "buffers were planned for", unit_pass_name(u.pass), u.unit);
  }
  const std::vector<int> units = gathered_units(uses);
  std::vector<int> slot(units.size());
  std::vector<size_t> of_class[2];  // each class's gathers so far
  for (size_t j = 0; j < units.size(); ++j) {
    const int c = b.klass(padded[size_t(units[j])]);
    std::vector<size_t>& seen = of_class[c];
    TRAINER_CHECK(b.gathers[c] > 0, "fsdp: gather {} of unit {} has no buffer of its size class", j, units[j]);
    // The previous occupant of the buffer must be released when this gather is issued (gather j - distance's release).
    if (seen.size() >= size_t(b.gathers[c])) {
      const size_t previous = seen[seen.size() - size_t(b.gathers[c])];
      TRAINER_CHECK(previous + size_t(b.distance) <= j,
                    "fsdp: gather {} of unit {} would overwrite gather {} still in use ({} buffers of its class, {} "
                    "gathers ahead): the schedule is not one the buffers were planned for",
                    j, units[j], previous, b.gathers[c], b.distance);
    }
    slot[j] = int(seen.size() % size_t(b.gathers[c]));
    seen.push_back(j);
  }
  return slot;
}

}  // namespace trainer
