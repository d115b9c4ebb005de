#include "core/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iterator>

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

uint64_t MemoryStats::on_alloc(Category c, size_t bytes) {
  const uint64_t id = ++allocations;
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
  if (timeline) timeline->log(*this, c, int64_t(bytes), id, false);
  return id;
}

void MemoryStats::on_free(Category c, size_t bytes, uint64_t id) {
  const int i = int(c);
  current[i] -= std::min(current[i], bytes);
  total -= std::min(total, bytes);
  if (timeline) timeline->log(*this, c, -int64_t(bytes), id, false);
}

void MemoryStats::on_alloc_failed(Category c, size_t bytes) {
  if (timeline) timeline->log(*this, c, int64_t(bytes), 0, true);
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

// ---- memory timeline ------------------------------------------------------------------------------------------------

// The phase and block names are kept as pointers: they must live as long as the log (string literals, as every
// ScopedRange's are).
void MemoryTimeline::log(const MemoryStats& where, Category c, int64_t bytes, uint64_t id, bool failed) {
  const double t_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  // While an exception propagates (std::uncaught_exceptions: an allocation that failed, a diverged loss, a
  // collective's error) the stack unwinds: what is freed then is the run's teardown, whichever range was open. A
  // failure caught and survived (attention_bench's out-of-memory point) ends it: later events have their places.
  if (!failed && std::uncaught_exceptions() > 0) {
    events_.push_back({t_ms, bytes, id, c, false, "teardown", nullptr, -1});
    return;
  }
  events_.push_back({t_ms, bytes, id, c, failed, where.phase, where.block_name, where.block});
}

namespace {

// A JSON string literal (the names are the program's own, but a block name could carry anything).
void append_json_string(std::string& out, const char* s) {
  if (!s) {
    out += "null";
    return;
  }
  out += '"';
  for (const char* p = s; *p; ++p) {
    const unsigned char ch = static_cast<unsigned char>(*p);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += char(ch);
    } else if (ch < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", unsigned(ch));
    } else {
      out += char(ch);
    }
  }
  out += '"';
}

void append_place(std::string& out, const char* phase, const char* block_name, int block) {
  out += "\"phase\": ";
  append_json_string(out, phase);
  out += ", \"block_name\": ";
  append_json_string(out, block_name);
  fmt::format_to(std::back_inserter(out), ", \"block\": {}", block);
}

}  // namespace

std::string MemoryTimeline::to_json(int rank, int world_size, const std::string& device) const {
  // Replay the log for the peak: the first event at which the running total of counted bytes is highest.
  std::array<int64_t, kNumCategories> cur{}, at_peak{};
  int64_t total = 0, peak = 0;
  size_t peak_event = 0;
  bool have_peak = false;
  for (size_t k = 0; k < events_.size(); ++k) {
    const MemoryEvent& e = events_[k];
    if (e.failed) continue;
    cur[size_t(e.category)] += e.bytes;
    total += e.bytes;
    if (total > peak) {
      peak = total;
      peak_event = k;
      at_peak = cur;
      have_peak = true;
    }
  }
  std::string out;
  out.reserve(160 * events_.size() + 1024);
  out += "{\"schema\": \"trainer.memory_timeline/1\", ";
  fmt::format_to(std::back_inserter(out), "\"rank\": {}, \"world_size\": {}, \"device\": ", rank, world_size);
  append_json_string(out, device.c_str());
  out += ",\n\"clock\": \"host steady clock, ms since the log started; on the GPU the time an op was enqueued\",\n";
  out += "\"categories\": [";
  for (int i = 0; i < kNumCategories; ++i)
    fmt::format_to(std::back_inserter(out), "{}\"{}\"", i ? ", " : "", category_name(Category(i)));
  out += "],\n\"events\": [";
  for (size_t k = 0; k < events_.size(); ++k) {
    const MemoryEvent& e = events_[k];
    fmt::format_to(std::back_inserter(out), "{}\n{{\"t_ms\": {:.4f}, \"bytes\": {}, \"id\": {}, \"category\": \"{}\", ",
                   k ? "," : "", e.t_ms, e.bytes, e.id, category_name(e.category));
    append_place(out, e.phase, e.block_name, e.block);
    if (e.failed) out += ", \"failed\": true";
    out += "}";
  }
  out += "],\n\"peak\": {";
  fmt::format_to(std::back_inserter(out), "\"bytes\": {}, ", peak);
  if (have_peak) {
    const MemoryEvent& e = events_[peak_event];
    fmt::format_to(std::back_inserter(out), "\"event\": {}, \"t_ms\": {:.4f}, ", peak_event, e.t_ms);
    append_place(out, e.phase, e.block_name, e.block);
  } else {
    out += "\"event\": null, \"t_ms\": null, \"phase\": null, \"block_name\": null, \"block\": -1";
  }
  out += ", \"by_category\": {";
  for (int i = 0; i < kNumCategories; ++i)
    fmt::format_to(std::back_inserter(out), "{}\"{}\": {}", i ? ", " : "", category_name(Category(i)),
                   at_peak[size_t(i)]);
  out += "}}}\n";
  return out;
}

std::string memory_timeline_path(const std::string& path, int rank) {
  if (rank == 0) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;  // where the file name starts
  const bool has_ext = dot != std::string::npos && dot > base;       // ".m" is a name, not an extension
  const std::string tag = fmt::format(".rank{}", rank);
  return has_ext ? path.substr(0, dot) + tag + path.substr(dot) : path + tag;
}

}  // namespace trainer
