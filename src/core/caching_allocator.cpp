#include "core/caching_allocator.h"

#include <algorithm>

#include "core/errors.h"

namespace trainer {

size_t CachingAllocator::round_size(size_t bytes) {
  const size_t g = bytes <= kLargeThreshold ? kSmallRound : kLargeRound;
  return std::max<size_t>(1, (bytes + g - 1) / g) * g;
}

CachingAllocator::~CachingAllocator() {
  for (const auto& [size, p] : free_) src_.free(p);
}

void* CachingAllocator::from_source(size_t size) {
  void* p = src_.alloc(size);
  if (!p) return nullptr;
  ++counters_.source_allocs;
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return p;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  // The smallest cached block >= size (an exact size when there is one), if it wastes at most a quarter of size:
  // steps allocate the same shapes again, so exact hits are the rule and the bound only keeps a small request from
  // pinning a much larger block.
  // Outside a capture, private blocks are passed over (they stay the graph's).
  auto it = free_.lower_bound(size);
  while (it != free_.end() && it->first <= size + size / 4 && !capturing_ && private_.count(it->second)) ++it;
  if (it != free_.end() && it->first <= size + size / 4) {
    const size_t got = it->first;
    void* p = it->second;
    free_.erase(it);
    cached_ -= got;
    live_.emplace(p, got);
    if (capturing_) private_.insert(p);
    ++counters_.allocations;
    ++counters_.reused;
    return p;
  }
  void* p = from_source(size);
  bool any_shared = false;  // a cached block release_cached would give back (not a graph's)
  for (const auto& [sz, q] : free_) any_shared = any_shared || !private_.count(q);
  if (!p && any_shared && !capturing_) {  // out of memory: give the cached blocks back, then ask once more
    ++counters_.flushes;
    release_cached();
    p = from_source(size);
  }
  if (!p) return nullptr;
  live_.emplace(p, size);
  if (capturing_) private_.insert(p);
  ++counters_.allocations;
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  auto it = live_.find(p);
  TRAINER_CHECK(it != live_.end(), "CachingAllocator: free of {} which it did not allocate (or freed twice)", p);
  if (capturing_) private_.insert(p);
  free_.emplace(it->second, p);
  cached_ += it->second;
  live_.erase(it);
}

void CachingAllocator::release_cached() {
  bool any = false;  // a cached block that may go back (private ones stay: a graph replays into them)
  for (const auto& [size, p] : free_) any = any || !private_.count(p);
  if (!any) return;
  src_.sync();  // queued work may still use a cached block (it was freed in stream order, not after the stream)
  for (auto it = free_.begin(); it != free_.end();) {
    if (private_.count(it->second)) {
      ++it;
      continue;
    }
    src_.free(it->second);
    ++counters_.source_frees;
    reserved_ -= it->first;
    cached_ -= it->first;
    it = free_.erase(it);
  }
}

}  // namespace trainer
