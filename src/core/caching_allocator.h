// CachingAllocator: keeps freed device blocks and hands them out again, so that buffers allocated and freed every
// step (a block's saved activations: allocated in the forward, freed in the backward) cost no cudaMalloc / cudaFree,
// which synchronise the device and take up to milliseconds for large blocks.
//
// Sizes are rounded up (round_size: to 512 B up to 1 MiB, to 2 MiB above), and a freed block goes into one free
// list ordered by size. An allocation takes the smallest cached block that is at least its rounded size and at most
// a quarter larger (an exact size first, being the smallest); otherwise it asks the source (cudaMalloc) for a new
// block. When the source fails, the allocator synchronises, returns every cached block that is not private (below)
// to the source and tries once more (not inside a capture, where it would synchronise); if that fails too it returns
// nullptr (Buffer then raises OutOfMemory). Blocks are never split.
//
// Stream order: reuse needs no synchronisation because the backend runs every op on its one compute stream, so a
// block freed after ops were enqueued on it is handed again only to ops enqueued later on the same stream, which run
// after them. A buffer that another stream reads or writes (a communicator's) must stay allocated until that stream
// is done with it; the communicators keep their buffers for the whole run, and wait() orders the compute stream
// after a collective, so this holds today.
//
// Private blocks (CUDA graphs, backend/backend.h Backend::capture): between begin_private() and end_private() every
// block the allocator hands out or takes back becomes private to the capture. A captured graph reads and writes those
// addresses on every replay, so outside a capture a private block is never handed out (allocate skips it) nor given
// back to the source (release_cached keeps it); a later capture may use it again. release_private() (the graph is
// gone) makes them ordinary cached or live blocks; the private set is one, so one capture's graph may exist at a
// time (CudaBackend refuses a second). The choice inside a capture is the same best fit as outside.
//
// The source is three functions (alloc, free, sync), which lets the tests drive the logic on the host. Not
// thread-safe (neither is MemoryStats): one allocator per backend, used from the thread that runs the backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace trainer {

class CachingAllocator {
 public:
  struct Source {
    std::function<void*(size_t)> alloc;  // a new block of exactly `bytes`, or nullptr when out of memory
    std::function<void(void*)> free;     // returns a block to the device
    std::function<void()> sync;          // waits until no queued work uses any block (before blocks go back)
  };
  /// Counts since construction (for tests and logs).
  struct Counters {
    uint64_t allocations = 0;    // allocate() calls that returned a block
    uint64_t reused = 0;         // ... of which served from the cache
    uint64_t source_allocs = 0;  // blocks obtained from the source
    uint64_t source_frees = 0;   // blocks returned to the source
    uint64_t flushes = 0;        // times the cache was emptied after the source failed
  };

  explicit CachingAllocator(Source source) : src_(std::move(source)) {}
  /// Returns the cached blocks to the source (no sync: the owner synchronises first). Blocks still allocated are
  /// left alone (their owner outlives the backend: a bug elsewhere).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (round_size(bytes) are reserved for it), or nullptr when out of memory after the
  /// cache was emptied and the source asked again.
  void* allocate(size_t bytes);
  /// Puts a block from allocate() back into the cache (no sync). RuntimeError for a pointer it did not hand out.
  void deallocate(void* p);
  /// Synchronises, then returns every cached block to the source (private ones stay).
  void release_cached();

  /// Opens / closes a capture: blocks allocated or deallocated in between become private (see above). Inside a
  /// capture the cache is never flushed (that would synchronise): out of memory returns nullptr at once.
  void begin_private() { capturing_ = true; }
  void end_private() { capturing_ = false; }
  /// The captures that used the private blocks are gone: they become ordinary blocks again.
  void release_private() { private_.clear(); }
  size_t private_blocks() const { return private_.size(); }

  /// Bytes held from the source: live blocks (rounded sizes) plus cached ones; the highest value so far.
  size_t reserved_bytes() const { return reserved_; }
  size_t peak_reserved_bytes() const { return peak_reserved_; }
  size_t cached_bytes() const { return cached_; }
  size_t cached_blocks() const { return free_.size(); }
  size_t live_blocks() const { return live_.size(); }
  const Counters& counters() const { return counters_; }

  /// The block size an allocation of `bytes` reserves: a multiple of kSmallRound (512 B, at least one) up to
  /// kLargeThreshold (1 MiB), else a multiple of kLargeRound (2 MiB).
  static size_t round_size(size_t bytes);
  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kLargeThreshold = size_t(1) << 20;
  static constexpr size_t kLargeRound = size_t(2) << 20;

 private:
  void* from_source(size_t size);  // nullptr when the source fails

  Source src_;
  std::multimap<size_t, void*> free_;        // cached blocks by size, bytes
  std::unordered_map<void*, size_t> live_;   // handed-out blocks and their sizes, bytes
  std::unordered_set<void*> private_;        // blocks a capture used (cached or live)
  bool capturing_ = false;
  size_t reserved_ = 0, peak_reserved_ = 0, cached_ = 0;
  Counters counters_;
};

}  // namespace trainer
