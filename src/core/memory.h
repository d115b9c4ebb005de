// Memory accounting: every allocation is tagged with a Category; current and peak bytes are kept per category and in
// total, so a result record can break the peak down and an OOM message can say what was in use.
#pragma once
#include <array>
#include <cstddef>
#include <string>

namespace trainer {

// head: the fused LM head + loss's per-chunk buffers (ln_final output, logits, their gradient).
enum class Category : int { parameters, gradients, optimizer, activations, head, workspace, communication, kCount };
inline constexpr int kNumCategories = int(Category::kCount);
const char* category_name(Category c);

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

  void on_alloc(Category c, size_t bytes);
  void on_free(Category c, size_t bytes);
  void reset_peak();                               // peak := current (e.g. after set-up)
  /// "parameters 1.2 GiB, gradients 1.2 GiB, ..." of the categories in use now.
  std::string describe_current() const;
};

std::string format_bytes(size_t bytes);  // "1.23 GiB", "512 KiB", ...

}  // namespace trainer
