// Memory accounting on the host: the memory timeline (MemoryStats + MemoryTimeline, written for
// profile.memory_timeline) and the caching allocator's logic (core/caching_allocator.h) driven by a fake device whose
// blocks, failures and synchronisations the test counts. The CUDA wiring of the allocator is tested in
// test_cuda_ops.cpp ("cuda caching allocator ...").
#include <catch2/catch.hpp>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/caching_allocator.h"
#include "core/errors.h"
#include "core/memory.h"

namespace {

using namespace trainer;
using nlohmann::json;
using Catch::Matchers::Contains;

TEST_CASE("memory timeline: every allocation and free with its phase and block; the replayed peak", "[memory]") {
  MemoryTimeline log;
  BackendOptions opts;
  opts.memory_timeline = &log;
  auto be = make_backend(Device::cpu, 0, opts);
  Buffer params = be->alloc(1000, Category::parameters);
  std::vector<Buffer> acts;
  {
    ScopedRange fwd(*be, "forward", "phase");
    for (int i = 0; i < 3; ++i) {
      ScopedRange blk(*be, "block", "block", i);
      acts.push_back(be->alloc(size_t(100 * (i + 1)), Category::activations));
    }
    ScopedRange head(*be, "lm_head", "block");
    Buffer logits = be->alloc(5000, Category::workspace);  // the peak: 1000 + 600 + 5000, freed at once
  }
  {
    ScopedRange bwd(*be, "backward", "phase");
    for (int i = 2; i >= 0; --i) {
      ScopedRange blk(*be, "block", "block", i);
      acts[size_t(i)].reset();
    }
  }
  CHECK_THROWS_AS(be->alloc(size_t(1) << 62, Category::optimizer), OutOfMemory);  // logged as failed
  const MemoryStats& ms = be->memory();
  REQUIRE(ms.peak_total == 6600);

  const json doc = json::parse(log.to_json(0, 1, "cpu"));
  CHECK(doc["schema"] == "trainer.memory_timeline/1");
  CHECK(doc["categories"] == json({"parameters", "gradients", "optimizer", "activations", "head", "workspace",
                                   "communication"}));
  const json& ev = doc["events"];
  REQUIRE(ev.size() == 10);  // params, 3 acts, logits, logits freed, 3 acts freed, the failed request
  // Independent replay: the running sum of counted bytes; allocation ids are unique and each free names one.
  int64_t total = 0, peak = 0;
  size_t peak_at = 0;
  std::map<uint64_t, int64_t> alive;
  double last_t = 0;
  for (size_t k = 0; k < ev.size(); ++k) {
    const json& e = ev[k];
    CHECK(e["t_ms"].get<double>() >= last_t);
    last_t = e["t_ms"].get<double>();
    if (e.value("failed", false)) continue;
    const int64_t b = e["bytes"].get<int64_t>();
    const uint64_t id = e["id"].get<uint64_t>();
    if (b > 0) {
      CHECK(alive.emplace(id, b).second);
    } else {
      REQUIRE(alive.count(id) == 1);
      CHECK(alive[id] == -b);
      alive.erase(id);
    }
    total += b;
    if (total > peak) {
      peak = total;
      peak_at = k;
    }
  }
  CHECK(total == 1000);                        // the parameters are still alive
  CHECK(peak == int64_t(ms.peak_total));
  CHECK(doc["peak"]["bytes"] == peak);
  CHECK(doc["peak"]["event"] == peak_at);
  CHECK(doc["peak"]["phase"] == "forward");
  CHECK(doc["peak"]["block_name"] == "lm_head");
  CHECK(doc["peak"]["by_category"]["workspace"] == 5000);
  CHECK(doc["peak"]["by_category"]["activations"] == 600);
  // Places: the first event is set-up outside any block; the third activation came from block 2 in the forward and
  // went in block 2 in the backward.
  CHECK(ev[0]["phase"] == "setup");
  CHECK(ev[0]["block_name"].is_null());
  CHECK(ev[0]["category"] == "parameters");
  CHECK(ev[3]["phase"] == "forward");
  CHECK(ev[3]["block_name"] == "block");
  CHECK(ev[3]["block"] == 2);
  CHECK(ev[3]["bytes"] == 300);
  CHECK(ev[6]["phase"] == "backward");
  CHECK(ev[6]["block"] == 2);
  CHECK(ev[6]["bytes"] == -300);
  CHECK(ev[6]["id"] == ev[3]["id"]);
  CHECK(ev[9]["failed"] == true);
  CHECK(ev[9]["category"] == "optimizer");
  CHECK(ev[9]["bytes"] == int64_t(1) << 62);
  // A failed allocation the job does not survive: what is freed while it unwinds, inside a still-open range, is the
  // run's teardown, not that range
  try {
    ScopedRange fwd(*be, "forward", "phase");
    Buffer owned = std::move(params);
    Buffer never = be->alloc(size_t(1) << 62, Category::optimizer);  // logged as failed, then the stack unwinds
  } catch (const OutOfMemory&) {
  }
  const json after = json::parse(log.to_json(0, 1, "cpu"))["events"];
  REQUIRE(after.size() == 12);
  CHECK(after[10]["failed"] == true);
  CHECK(after[10]["phase"] == "forward");  // where it failed
  CHECK(after[11]["phase"] == "teardown");
  CHECK(after[11]["bytes"] == -1000);
  CHECK(after[11]["block"] == -1);
  // One that is caught and survived (attention_bench's out-of-memory point): later events have their places again
  {
    ScopedRange bwd(*be, "backward", "phase");
    Buffer later = be->alloc(16, Category::activations);
  }
  const json survived = json::parse(log.to_json(0, 1, "cpu"))["events"];
  REQUIRE(survived.size() == 14);
  CHECK(survived[12]["phase"] == "backward");
  CHECK(survived[13]["phase"] == "backward");

  // A failure that is not an out-of-memory: what the unwinding frees is teardown too, though the range is open and no
  // allocation failed
  {
    MemoryTimeline log2;
    BackendOptions o2;
    o2.memory_timeline = &log2;
    auto be2 = make_backend(Device::cpu, 0, o2);
    Buffer kept = be2->alloc(64, Category::parameters);
    try {
      ScopedRange bwd(*be2, "backward", "phase");
      Buffer local = be2->alloc(128, Category::activations);
      throw std::runtime_error("a diverged loss");
    } catch (const std::runtime_error&) {
    }
    {
      ScopedRange bwd(*be2, "backward", "phase");
      Buffer quiet_free = be2->alloc(32, Category::activations);
    }
    const json ev2 = json::parse(log2.to_json(0, 1, "cpu"))["events"];
    REQUIRE(ev2.size() == 5);
    CHECK(ev2[1]["phase"] == "backward");  // allocated in the open range
    CHECK(ev2[2]["phase"] == "teardown");  // freed while the exception propagated
    CHECK(ev2[2]["bytes"] == -128);
    CHECK(ev2[2]["block"] == -1);
    CHECK(ev2[4]["phase"] == "backward");  // once caught, events take their range again
  }

  // Without a log nothing is recorded and the ids still count.
  auto quiet = make_backend(Device::cpu, 0);
  const size_t before = log.events().size();
  Buffer b = quiet->alloc(64, Category::workspace);
  CHECK(quiet->memory().allocations == 1);
  CHECK(log.events().size() == before);
}

TEST_CASE("memory timeline: per-rank file names", "[memory]") {
  CHECK(memory_timeline_path("out/m.json", 0) == "out/m.json");
  CHECK(memory_timeline_path("out/m.json", 3) == "out/m.rank3.json");
  CHECK(memory_timeline_path("out/m", 1) == "out/m.rank1");
  CHECK(memory_timeline_path("out.d/m", 1) == "out.d/m.rank1");
  CHECK(memory_timeline_path(".m", 2) == ".m.rank2");
}

/// A device of `capacity` bytes made of host blocks, counting what the allocator asks of it.
struct FakeDevice {
  size_t capacity, used = 0;
  int syncs = 0, mallocs = 0, frees = 0;
  std::map<void*, size_t> blocks;
  std::vector<std::vector<char>> storage;
  explicit FakeDevice(size_t cap) : capacity(cap) {}
  CachingAllocator::Source source() {
    return {[this](size_t n) -> void* {
              if (used + n > capacity) return nullptr;
              storage.emplace_back(n);
              void* p = storage.back().data();
              blocks[p] = n;
              used += n;
              ++mallocs;
              return p;
            },
            [this](void* p) {
              REQUIRE(blocks.count(p) == 1);
              used -= blocks[p];
              blocks.erase(p);
              ++frees;
            },
            [this] { ++syncs; }};
  }
};

TEST_CASE("caching allocator: size classes", "[memory]") {
  using A = CachingAllocator;
  CHECK(A::round_size(0) == 512);
  CHECK(A::round_size(1) == 512);
  CHECK(A::round_size(512) == 512);
  CHECK(A::round_size(513) == 1024);
  CHECK(A::round_size(size_t(1) << 20) == size_t(1) << 20);
  CHECK(A::round_size((size_t(1) << 20) + 1) == size_t(2) << 20);
  CHECK(A::round_size((size_t(5) << 20) + 7) == size_t(6) << 20);
}

TEST_CASE("caching allocator: reuse without the device, best fit within a bound, flush and retry", "[memory]") {
  constexpr size_t MiB = size_t(1) << 20;
  FakeDevice dev(64 * MiB);
  {
    CachingAllocator a(dev.source());
    void* x = a.allocate(3 * MiB + 100);  // 4 MiB
    REQUIRE(x);
    CHECK(a.reserved_bytes() == 4 * MiB);
    a.deallocate(x);
    CHECK(a.reserved_bytes() == 4 * MiB);
    CHECK(a.cached_bytes() == 4 * MiB);
    CHECK(dev.frees == 0);
    // Same size class: the same block, no device call, no sync.
    void* y = a.allocate(4 * MiB);
    CHECK(y == x);
    CHECK(dev.mallocs == 1);
    CHECK(dev.syncs == 0);
    CHECK(a.counters().reused == 1);
    // Another one of the class while y is live: a new block.
    void* z = a.allocate(3 * MiB);
    CHECK(z != y);
    CHECK(a.reserved_bytes() == 8 * MiB);
    a.deallocate(y);
    a.deallocate(z);
    // 6 MiB cached? No: two 4 MiB blocks; a 6 MiB request does not fit them, and a 2 MiB request would waste half
    // of one (over the quarter bound): both go to the device.
    void* big = a.allocate(5 * MiB);  // 6 MiB
    void* small = a.allocate(2 * MiB);
    CHECK(dev.mallocs == 4);
    CHECK(a.reserved_bytes() == 16 * MiB);
    CHECK(a.peak_reserved_bytes() == 16 * MiB);
    a.deallocate(big);
    // Best fit: 5 MiB of request = 6 MiB class; cached are 4, 4 and 6 MiB: the 6 MiB block comes back.
    CHECK(a.allocate(5 * MiB + 1) == big);
    // Small blocks: 1000 B -> 1024 B, reused by a 600 B request (also 1024 B).
    void* s1 = a.allocate(1000);
    a.deallocate(s1);
    CHECK(a.allocate(600) == s1);
    CHECK(a.live_blocks() == 3);  // small, big, s1 (the two 4 MiB blocks are cached)
    CHECK(a.cached_blocks() == 2);

    // Out of memory: 64 MiB device, 16 MiB + 1 KiB reserved (8 MiB of it cached). A 50 MiB request fails, the
    // cache goes back after one sync, and the retry succeeds in the space the cached blocks held.
    const int syncs = dev.syncs;
    void* huge = a.allocate(50 * MiB);
    REQUIRE(huge);
    CHECK(dev.syncs == syncs + 1);
    CHECK(a.counters().flushes == 1);
    CHECK(a.cached_blocks() == 0);
    CHECK(a.reserved_bytes() == 2 * MiB + 6 * MiB + 1024 + 50 * MiB);
    CHECK(a.reserved_bytes() == dev.used);
    // Impossible even with an empty cache: nullptr, nothing changes.
    CHECK(a.allocate(size_t(1) << 40) == nullptr);
    CHECK(a.reserved_bytes() == dev.used);
    CHECK_THROWS_WITH(a.deallocate(reinterpret_cast<void*>(0x10)), Contains("did not allocate"));
    a.deallocate(huge);
    CHECK(a.peak_reserved_bytes() == 2 * MiB + 6 * MiB + 1024 + 50 * MiB);
  }
  // The destructor returned the cached blocks; the three still live are the owner's (here: leaked on purpose).
  CHECK(dev.blocks.size() == 3);
}

TEST_CASE("caching allocator: blocks a capture used stay its own until released", "[memory]") {
  constexpr size_t MiB = size_t(1) << 20;
  FakeDevice dev(64 * MiB);
  CachingAllocator a(dev.source());
  // An uncaptured step caches a 4 MiB and a 2 MiB block.
  void* x = a.allocate(4 * MiB);
  void* y = a.allocate(2 * MiB);
  a.deallocate(x);
  a.deallocate(y);
  // The capture takes the cached blocks (no device call), frees x, takes it again, and keeps y live.
  a.begin_private();
  CHECK(a.allocate(4 * MiB) == x);
  CHECK(a.allocate(2 * MiB) == y);
  a.deallocate(x);
  CHECK(a.allocate(4 * MiB) == x);  // inside the capture private blocks are reused as usual
  a.deallocate(x);
  a.end_private();
  CHECK(dev.mallocs == 2);
  CHECK(a.private_blocks() == 2);
  // Outside the capture neither is handed out: a request of x's size gets a new block.
  void* z = a.allocate(4 * MiB);
  CHECK(z != x);
  CHECK(dev.mallocs == 3);
  // y freed later (outside) is still the graph's; flushing the cache keeps x and y, returns z.
  a.deallocate(y);
  a.deallocate(z);
  void* w = a.allocate(2 * MiB);
  CHECK(w != y);
  a.deallocate(w);
  const int frees = dev.frees;
  a.release_cached();
  CHECK(dev.frees == frees + 2);  // z and w
  CHECK(a.cached_blocks() == 2);  // x and y
  CHECK(a.reserved_bytes() == 6 * MiB);
  // Out of memory outside a capture with only private blocks cached: no flush of them, nullptr.
  CHECK(a.allocate(60 * MiB) == nullptr);
  CHECK(a.cached_blocks() == 2);
  // A second capture may use them again; after release_private() anyone may.
  a.begin_private();
  CHECK(a.allocate(4 * MiB) == x);
  a.deallocate(x);
  a.end_private();
  a.release_private();
  CHECK(a.private_blocks() == 0);
  CHECK(a.allocate(4 * MiB) == x);
  CHECK(a.allocate(2 * MiB) == y);
}

}  // namespace
