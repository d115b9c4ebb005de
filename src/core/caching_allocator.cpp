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
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 4) {
    const size_t got = it->first;
    void* p = it->second;
    free_.erase(it);
    cached_ -= got;
    live_.emplace(p, got);
    ++counters_.allocations;
    ++counters_.reused;
    return p;
  }
  void* p = from_source(size);
  if (!p && !free_.empty()) {  // out of memory: give the cached blocks back, then ask once more
    ++counters_.flushes;
    release_cached();
    p = from_source(size);
  }
  if (!p) return nullptr;
  live_.emplace(p, size);
  ++counters_.allocations;
  return p;
}

void CachingAllocator::deallocate(void* p) {
  if (!p) return;
  auto it = live_.find(p);
  TRAINER_CHECK(it != live_.end(), "CachingAllocator: free of {} which it did not allocate (or freed twice)", p);
  free_.emplace(it->second, p);
  cached_ += it->second;
  live_.erase(it);
}

void CachingAllocator::release_cached() {
  if (free_.empty()) return;
  src_.sync();  // queued work may still use a cached block (it was freed in stream order, not after the stream)
  for (const auto& [size, p] : free_) {
    src_.free(p);
    ++counters_.source_frees;
    reserved_ -= size;
  }
  free_.clear();
  cached_ = 0;
}

}  // namespace trainer
