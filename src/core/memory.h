// Memory accounting: every allocation is tagged with a Category; current and peak bytes are kept per category and in
// total, so a result record can break the peak down and an OOM message can say what was in use.
#pragma once
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

// head: the fused LM head + loss's per-chunk buffers (ln_final output, logits, their gradient).
enum class Category : int { parameters, gradients, optimizer, activations, head, workspace, communication, kCount };
inline constexpr int kNumCategories = int(Category::kCount);
const char* category_name(Category c);

class MemoryTimeline;

struct MemoryStats {
  std::array<size_t, kNumCategories> current{};   // bytes in use now, per category
  std::array<size_t, kNumCategories> at_peak{};   // bytes per category at the moment the total peaked
  std::array<size_t, kNumCategories> peak{};      // each category's own peak, bytes
  size_t total = 0;                               // bytes in use now
  size_t peak_total = 0;                          // highest total seen, bytes

  /// Where the program is now: the innermost open "phase" range (forward, backward, finish_backward, optimizer;
  /// "setup" outside any) and "block" range (name "block" with its index, or "lm_head" with index -1; nullptr outside
  /// any). ScopedRange keeps them current, whether or not a profiler is attached.
  const char* phase = "setup";
  const char* block_name = nullptr;
  int block = -1;
  /// The same, at the moment the total peaked.
  const char* peak_phase = "setup";
  const char* peak_block_name = nullptr;
  int peak_block = -1;

  uint64_t allocations = 0;  // allocations so far; on_alloc numbers them 1, 2, ... (the timeline's ids)
  /// The event log (profile.memory_timeline), or nullptr: then logging costs one pointer test per allocation.
  /// Owned by the caller; it must outlive every allocation made while it is attached.
  MemoryTimeline* timeline = nullptr;

  /// Accounts an allocation of `bytes` (as requested, not rounded) and returns its id (> 0), which on_free takes.
  uint64_t on_alloc(Category c, size_t bytes);
  /// Accounts the free of an allocation made by on_alloc (id 0: unknown, logged as such).
  void on_free(Category c, size_t bytes, uint64_t id = 0);
  /// Logs an allocation that failed (OutOfMemory follows); changes no count.
  void on_alloc_failed(Category c, size_t bytes);
  void reset_peak();                               // peak := current (e.g. after set-up)
  /// "parameters 1.2 GiB, gradients 1.2 GiB, ..." of the categories in use now.
  std::string describe_current() const;
};

std::string format_bytes(size_t bytes);  // "1.23 GiB", "512 KiB", ...

/// One allocation or free through Buffer, as the memory timeline logs it.
struct MemoryEvent {
  double t_ms;             // host steady clock, ms since the log started (on the GPU: when the op was enqueued)
  int64_t bytes;           // +bytes for an allocation, -bytes for a free (bytes as requested)
  uint64_t id;             // the allocation's id (MemoryStats::on_alloc); a free carries its allocation's id
  Category category;
  bool failed;             // an allocation that raised OutOfMemory: logged, never counted
  const char* phase;       // MemoryStats::phase at the time ("setup", "forward", ...)
  const char* block_name;  // MemoryStats::block_name (nullptr outside any block)
  int block;               // MemoryStats::block (-1 outside any block or for "lm_head")
};

/// The memory timeline (profile.memory_timeline): every allocation and free while attached to a MemoryStats
/// (MemoryStats::timeline), with the phase and block it happened in. Appending costs a clock read and a push_back.
/// Serialised by to_json as the document README.md describes ("Memory timeline", schema trainer.memory_timeline/1).
class MemoryTimeline {
 public:
  MemoryTimeline() : start_(std::chrono::steady_clock::now()) {}
  /// Appends one event, taking phase and block from `where`; an event while an exception propagates (the stack
  /// unwinding after a failed allocation or any other failure) has phase "teardown" and no block.
  void log(const MemoryStats& where, Category c, int64_t bytes, uint64_t id, bool failed);
  const std::vector<MemoryEvent>& events() const { return events_; }
  /// The whole log as one JSON document (compact, one event per line): schema, rank, world_size, device,
  /// categories, events, and peak (the highest replayed total, its event index, time, place and split by category).
  std::string to_json(int rank, int world_size, const std::string& device) const;

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<MemoryEvent> events_;
};

/// Where rank `rank` writes the timeline asked for as `path`: rank 0 `path` itself, rank r > 0 `path` with ".rank<r>"
/// before the extension ("m.json" -> "m.rank1.json"; "m" -> "m.rank1"). Each rank writes its own file: no
/// collective, so a rank that ran out of memory still writes its log.
std::string memory_timeline_path(const std::string& path, int rank);

}  // namespace trainer
