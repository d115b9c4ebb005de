// fsdp's full-size buffers (parallel/fsdp.cpp): the all_gather buffers that hold a unit's gathered weights and the
// gradient staging buffers that hold a unit's full gradient until its reduce_scatter has read it. They are made once
// and held for the run, each reused at one size, so what the device holds is what the planner's dry run counts (the
// caching allocator never sees a freed buffer asked for at another size: v45's per-use buffers reserved ~2 GiB above
// their plan on the 8B).
//
// Up to two size classes. The split is one of the units' padded sizes: units up to it take "small" buffers of `split`
// elements, larger ones "large" buffers of the largest padded unit. The split whose buffers (gather and staging, as the
// run's schedule holds them) take the fewest bytes wins, one class (split = largest) on a tie: the 8B's embedding and
// head (vocab x d_model, 1.16 GiB of bf16 each) are large and its blocks (0.38 GiB) small; tiny's blocks are its
// largest units, its embedding and head small at prefetch_layers 2 and from 5 on (2 ranks; one class is smaller at 0
// and 1 and ties at 3 and 4); xl keeps one class while D <= its 32 layers (every D gathers in a row are then blocks, 4x
// its embedding). A class's buffers rotate among its own gathers (or gradient-writing uses) in schedule order. Not
// counted in the choice: the shard-sized temporaries of the staging buffers (1/N of them). A forward-only run plans
// from its own schedule: no staging buffers, at most layers + 2 gathers ahead.
//
// Gather counts. Gather j is issued when gather j - D's last use is released (D = `distance`, fsdp's prefetch_layers +
// 1 capped at the gathers of the run's microbatch schedule), so when it is issued, gathers j - D + 1 .. j are the ones
// in flight or in use (every earlier one released). A class with as many buffers as the most gathers of that class in
// any D consecutive gathers of a schedule therefore finds gather j's buffer free at its issue: its previous occupant is
// the class's gather n_c earlier, which lies at j - D or before (else D consecutive gathers would hold n_c + 1 of the
// class). Staging counts: 2 where two gradient-writing uses of the class follow each other in a schedule (the blocks:
// one buffer is reduce-scattered while the next block's backward writes the other), else 1 (the head's and the
// embedding's backward are a whole backward apart; the second waits for the first's reduce_scatter, long done).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/residency.h"

namespace trainer {

struct FsdpBuffers {
  int64_t split = 0;    // elements of a small buffer: units padded to at most this use the small class
  int64_t largest = 0;  // elements of a large buffer (the largest padded unit)
  int gathers[2] = {0, 0};  // all_gather buffers of the small [0] and large [1] class
  int staging[2] = {0, 0};  // f32 gradient staging buffers of each class (made at the first backward use)
  int distance = 1;         // D: gathers issued ahead, prefetch_layers + 1 capped at the first schedule's gathers

  int klass(int64_t padded) const { return padded <= split ? 0 : 1; }
  int64_t elems(int c) const { return c == 0 ? split : largest; }
  /// Bytes of all gather buffers (elements of `gather_bytes` each: the compute dtype) and staging buffers (f32).
  size_t bytes(size_t gather_bytes) const;
};

/// The gather serving each use of a schedule (-1: the use reads no weights): consecutive uses of one unit that read
/// weights share one (a block's recompute and its backward; the head's forward and backward).
std::vector<int> gather_of_uses(const std::vector<UnitUse>& uses);

/// fsdp's buffer classes for units of padded sizes `padded` [units] (elements) used in `schedules` (fsdp passes the
/// model's microbatch order of the run, the training one or a forward-only run's; tests pass several; schedules[0]'s
/// gathers cap the distance), with `prefetch_layers` >= 0 and gather elements of `gather_bytes`: the split (one of the
/// padded sizes) whose buffers take the fewest bytes, the larger split (one class) on a tie. Schedules name units <
/// padded.size().
FsdpBuffers plan_fsdp_buffers(const std::vector<int64_t>& padded, const std::vector<std::vector<UnitUse>>& schedules,
                              int prefetch_layers, size_t gather_bytes);

/// For each gather of `uses` (gather_of_uses order), the buffer of its class it takes: the class's gathers rotate
/// through its buffers. Throws RuntimeError if a gather would find its buffer still in use, a gradient-writing use
/// has no staging buffer of its class or a use names a unit outside `padded` (a schedule unlike those `b` was
/// planned for).
std::vector<int> fsdp_gather_slots(const FsdpBuffers& b, const std::vector<int64_t>& padded,
                                   const std::vector<UnitUse>& uses);

}  // namespace trainer
