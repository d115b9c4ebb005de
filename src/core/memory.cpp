#include "core/memory.h"

#include <fmt/format.h>

#include <algorithm>

namespace trainer {

const char* category_name(Category c) {
  switch (c) {
    case Category::parameters: return "parameters";
    case Category::gradients: return "gradients";
    case Category::optimizer: return "optimizer";
    case Category::activations: return "activations";
    case Category::head: return "head";
    case Category::workspace: return "workspace";
    case Category::communication: return "communication";
    default: return "?";
  }
}

void MemoryStats::on_alloc(Category c, size_t bytes) {
  const int i = int(c);
  current[i] += bytes;
  total += bytes;
  peak[i] = std::max(peak[i], current[i]);
  if (total > peak_total) {
    peak_total = total;
    at_peak = current;
    peak_phase = phase;
    peak_block_name = block_name;
    peak_block = block;
  }
}

void MemoryStats::on_free(Category c, size_t bytes) {
  const int i = int(c);
  current[i] -= std::min(current[i], bytes);
  total -= std::min(total, bytes);
}

void MemoryStats::reset_peak() {
  peak_total = total;
  at_peak = current;
  peak_phase = phase;
  peak_block_name = block_name;
  peak_block = block;
  peak = current;
}

std::string MemoryStats::describe_current() const {
  std::string s;
  for (int i = 0; i < kNumCategories; ++i) {
    if (!current[i]) continue;
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", category_name(Category(i)), format_bytes(current[i]));
  }
  return s.empty() ? "nothing" : s;
}

std::string format_bytes(size_t b) {
  const double x = double(b);
  if (x >= double(1ull << 30)) return fmt::format("{:.2f} GiB", x / double(1ull << 30));
  if (x >= double(1ull << 20)) return fmt::format("{:.1f} MiB", x / double(1ull << 20));
  if (x >= 1024.0) return fmt::format("{:.1f} KiB", x / 1024.0);
  return fmt::format("{} B", b);
}

}  // namespace trainer
