// Reading configs: strict JSON -> RunConfig with errors naming the dotted key, the config text itself (comments,
// duplicate keys, underflowing numbers) and the `--set key.path=value` overlay. The keys come from schema.h.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <string_view>

#include "config/schema.h"
#include "core/errors.h"

namespace trainer {
namespace config_schema {
namespace {

// ---- from_json: strict reading, every error names the dotted key ------------------------------------------------
/// How a JSON value is described in "got ...": its type, plus the value for numbers (2.5 is not an integer) and
/// strings (quoted, cut at 40 characters: "maybe" for a boolean).
std::string describe(const json& v) {
  if (v.is_number()) return fmt::format("number {}", v.dump());
  if (v.is_string()) {
    const std::string& t = v.get_ref<const std::string&>();
    return fmt::format("string \"{}\"", t.size() <= 40 ? t : t.substr(0, 37) + "...");
  }
  return v.type_name();
}

/// The dotted path of the first key named `name` anywhere in `j` (depth first), or "": the "did you mean" hint for a
/// known key given in the wrong section (model.gemm_autotune -> gemm_autotune).
std::string find_key(const json& j, const std::string& name, const std::string& prefix = "") {
  if (!j.is_object()) return "";
  if (j.contains(name)) return prefix + name;
  for (const auto& item : j.items())
    if (std::string p = find_key(item.value(), name, prefix + item.key() + "."); !p.empty()) return p;
  return "";
}

[[noreturn]] void type_error(const std::string& key, std::string_view expected, bool nullable, const json& got) {
  throw ConfigError(fmt::format("config: '{}' must be {}{}, got {}", key, expected, nullable ? " or null" : "",
                                describe(got)));
}

/// Levenshtein distance, for the "did you mean" hint of an unknown key.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

template <class S>
[[noreturn]] void unknown_key(const S& section, const std::string& prefix, const std::string& key,
                              std::string_view context = {}) {
  std::string best;
  size_t best_d = 3;  // suggest only names within 2 edits
  fields(section, [&](const char* name, const auto&, const KeyDoc&) {
    const size_t d = edit_distance(key, name);
    if (d < best_d) best_d = d, best = name;
  });
  const std::string hint = best.empty() ? "" : fmt::format(" (did you mean '{}{}'?)", prefix, best);
  throw ConfigError(fmt::format("config: unknown key '{}{}'{}{}", prefix, key, hint, context));
}

template <Section S>
void read_value(const json& v, S& out, const std::string& key, bool nullable = false);  // sections, below

void read_value(const json& v, std::string& out, const std::string& key, bool nullable = false) {
  if (!v.is_string()) type_error(key, "a string", nullable, v);
  out = v.get<std::string>();
}

void read_value(const json& v, bool& out, const std::string& key, bool nullable = false) {
  if (!v.is_boolean()) type_error(key, "a boolean (true or false)", nullable, v);
  out = v.get<bool>();
}

void read_value(const json& v, double& out, const std::string& key, bool nullable = false) {
  if (!v.is_number()) type_error(key, "a number", nullable, v);
  out = v.get<double>();
}

/// Integers: JSON integers in range, or floats with an exact integer value (4.0, 1e3).
void read_value(const json& v, int& out, const std::string& key, bool nullable = false) {
  constexpr double lo = std::numeric_limits<int>::min(), hi = std::numeric_limits<int>::max();
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(hi)) type_error(key, "an integer (32-bit)", nullable, v);
  } else if (v.is_number_integer()) {
    const int64_t x = v.get<int64_t>();
    if (x < int64_t(lo) || x > int64_t(hi)) type_error(key, "an integer (32-bit)", nullable, v);
  } else if (v.is_number_float()) {
    const double x = v.get<double>();
    if (x != std::floor(x)) type_error(key, "an integer", nullable, v);
    if (x < lo || x > hi) type_error(key, "an integer (32-bit)", nullable, v);
  } else {
    type_error(key, "an integer", nullable, v);
  }
  out = v.is_number_float() ? int(v.get<double>()) : v.get<int>();
}

void read_value(const json& v, uint64_t& out, const std::string& key, bool nullable = false) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
  } else if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == std::floor(v.get<double>()) &&
             v.get<double>() < 18446744073709551616.0) {
    out = uint64_t(v.get<double>());
  } else {
    type_error(key, "a non-negative integer", nullable, v);
  }
}

void read_value(const json& v, std::vector<double>& out, const std::string& key, bool nullable = false) {
  if (!v.is_array()) type_error(key, "an array of numbers", nullable, v);
  std::vector<double> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) read_value(v[i], r[i], fmt::format("{}[{}]", key, i));
  out = std::move(r);
}

void read_value(const json& v, std::vector<int>& out, const std::string& key, bool nullable = false) {
  if (!v.is_array()) type_error(key, "an array of integers", nullable, v);
  std::vector<int> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) read_value(v[i], r[i], fmt::format("{}[{}]", key, i));
  out = std::move(r);
}

void read_value(const json& v, std::vector<std::string>& out, const std::string& key, bool nullable = false) {
  if (!v.is_array()) type_error(key, "an array of strings", nullable, v);
  std::vector<std::string> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) read_value(v[i], r[i], fmt::format("{}[{}]", key, i));
  out = std::move(r);
}

template <class T>
void read_value(const json& v, std::optional<T>& out, const std::string& key, bool = false) {
  if (v.is_null()) {
    out.reset();
    return;
  }
  T x{};
  read_value(v, x, key, /*nullable=*/true);
  out = std::move(x);
}

/// Overlays the keys of object `j` on section `s`; `prefix` is the dotted path of the section ("" or "model.").
/// Top-level keys that were renamed: a config file or --set naming the old key gets the new one in its error.
void renamed_key(const std::string& key, std::string_view context = {}) {
  if (key == "allow_tf32")  // 2026-12-02: one key for how fp32 products run
    throw ConfigError(fmt::format("config: 'allow_tf32' was replaced by 'fp32_matmul': \"tf32\" for true, \"ieee\" "
                                  "for false (\"3xtf32\": fp32-accurate products on the tensor cores){}", context));
}

template <Section S>
void read_section(const json& j, S& s, const std::string& prefix) {
  for (const auto& [k, v] : j.items()) {
    bool found = false;
    fields(s, [&](const char* name, auto& member, const KeyDoc&) {
      if (k != name) return;
      found = true;
      read_value(v, member, prefix + k);
    });
    if (!found && prefix.empty()) renamed_key(k);
    if (!found) unknown_key(s, prefix, k);
  }
}

template <Section S>
void read_value(const json& v, S& out, const std::string& key, bool nullable) {
  if (!v.is_object()) type_error(key, "an object", nullable, v);
  read_section(v, out, key + ".");
}

template <Section S>
void read_root(const json& j, S& s, const std::string& section) {
  if (section.empty()) {
    if (!j.is_object()) throw ConfigError(fmt::format("config: the config must be a JSON object, got {}", describe(j)));
    read_section(j, s, "");
  } else {
    read_value(j, s, section);
  }
}

/// ConfigError for a number literal in config text that underflows to 0 (1e-400: JSON parsers read it as 0.0 without
/// a word). Scans the text outside strings and comments; names the line.
void check_no_underflow(const std::string& text, const std::string& origin) {
  int line = 1;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      ++line, ++i;
    } else if (c == '"') {  // a string: skip to its closing quote
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
        else if (text[i] == '\n') ++line;
      }
      ++i;
    } else if (c == '/' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '*')) {
      const bool block = text[i + 1] == '*';
      const size_t end = block ? text.find("*/", i + 2) : text.find('\n', i);
      const size_t stop = end == std::string::npos ? text.size() : (block ? end + 2 : end);
      line += int(std::count(text.begin() + long(i), text.begin() + long(stop), '\n'));
      i = stop;
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') {
      size_t j = i + 1;
      while (j < text.size() && (std::isdigit(static_cast<unsigned char>(text[j])) || std::strchr(".eE+-", text[j])))
        ++j;
      const std::string lit = text.substr(i, j - i);
      const std::string mantissa = lit.substr(0, lit.find_first_of("eE"));
      if (lit.find_first_of("eE") != std::string::npos && mantissa.find_first_of("123456789") != std::string::npos &&
          std::strtod(lit.c_str(), nullptr) == 0.0)
        throw ConfigError(fmt::format(
            "config: '{}' line {}: the number {} underflows to 0 (below the range of a double)", origin, line, lit));
      i = j;
    } else {
      ++i;
    }
  }
}

/// True when the key path names a string field (std::string or std::optional<std::string>).
template <Section S>
bool is_string_key(const S& s, std::span<const std::string> path) {
  bool result = false;
  fields(s, [&](const char* name, const auto& member, const KeyDoc&) {
    if (path.empty() || path[0] != name) return;
    using T = std::decay_t<decltype(member)>;
    if constexpr (Section<T>)
      result = is_string_key(member, path.subspan(1));
    else
      result = path.size() == 1 && (std::is_same_v<T, std::string> || std::is_same_v<T, std::optional<std::string>>);
  });
  return result;
}

}  // namespace

// ---- files and overrides --------------------------------------------------------------------------------------
/// The whole file as bytes. ConfigError "config: cannot read 'X': <strerror>" (missing, unreadable, a directory).
std::string read_text_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(fmt::format("config: cannot read '{}': {}", path, std::strerror(errno)));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw ConfigError(fmt::format("config: cannot read '{}': {}", path, std::strerror(err)));
    }
    if (n == 0) break;
    text.append(buf, size_t(n));
  }
  ::close(fd);
  return text;
}

/// Parses config text; comments (// and /* */) are allowed. ConfigError with nlohmann's line/column message, for
/// a key given twice in one object (JSON would silently keep the last one), and for a number that underflows to 0.
json parse_config_text(const std::string& text, const std::string& origin) {
  check_no_underflow(text, origin);
  struct Frame {
    std::string name;           // the key this object is the value of ("" for the root)
    std::set<std::string> keys; // the keys seen in it so far
  };
  std::vector<Frame> frames;
  std::string last_key;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      frames.push_back({frames.empty() ? std::string() : last_key, {}});
    } else if (event == json::parse_event_t::object_end) {
      frames.pop_back();
    } else if (event == json::parse_event_t::key) {
      last_key = parsed.get<std::string>();
      if (!frames.back().keys.insert(last_key).second) {
        std::string where;
        for (size_t f = 1; f < frames.size(); ++f) where += frames[f].name + ".";
        throw ConfigError(fmt::format("config: '{}' gives the key '{}{}' twice", origin, where, last_key));
      }
    }
    return true;
  };
  try {
    return json::parse(text, check, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    if (const auto p = what.find("] "); what.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      what = what.substr(p + 2);
    std::replace(what.begin(), what.end(), '\n', ' ');
    throw ConfigError(fmt::format("config: '{}' is not valid JSON: {}", origin, what));
  } catch (const json::out_of_range& e) {  // a number literal beyond double's range (1e400)
    std::string what = e.what();
    if (const auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw ConfigError(fmt::format("config: '{}': {} (beyond the range of a double)", origin, what));
  }
}

/// Applies one "key.path=value" to `full` (the complete config as JSON, so every key exists). An array element is
/// addressed by its index ("optimizer.betas.1=0.95"). The value is parsed as JSON, else taken as a string; a string
/// key also takes numbers and booleans as text ("name=123"). An object value is merged into an object key.
void apply_override(json& full, const std::string& text) {
  const std::string context = fmt::format(" (in --set {})", text);
  const size_t eq = text.find('=');
  CONFIG_CHECK(eq != std::string::npos && eq > 0, "config: --set '{}' is not of the form key.path=value", text);
  const std::string key = text.substr(0, eq), raw = text.substr(eq + 1);
  std::vector<std::string> parts;
  for (size_t b = 0;;) {
    const size_t e = key.find('.', b);
    parts.push_back(key.substr(b, e == std::string::npos ? std::string::npos : e - b));
    CONFIG_CHECK(!parts.back().empty(), "config: --set '{}': empty name in key '{}'", text, key);
    if (e == std::string::npos) break;
    b = e + 1;
  }

  json* node = &full;
  std::string walked;
  for (const auto& part : parts) {
    const std::string here = walked.empty() ? part : walked + "." + part;
    if (node->is_object() && node->contains(part)) {
      node = &(*node)[part];
    } else if (node->is_array()) {
      const bool digits = std::all_of(part.begin(), part.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
      CONFIG_CHECK(digits && part.size() < 9 && std::stoul(part) < node->size(),
                   "config: '{}' has no element {} (it has {}){}", walked, part, node->size(), context);
      node = &(*node)[std::stoul(part)];
    } else {
      if (walked.empty()) renamed_key(part, context);
      // a key that exists, whose value is null or a number, string or boolean: nothing below it to set
      CONFIG_CHECK(node->is_object(), "config: '{}' is {}, so '{}' has nothing to set: give the whole value (--set "
                   "{}=...){}", walked, node->is_null() ? std::string("null") : node->dump(), here, walked, context);
      std::string best, hint;  // the nearest existing key at this level, within 2 edits, as for config files
      size_t best_d = 3;
      for (const auto& item : node->items())
        if (const size_t d = edit_distance(part, item.key()); d < best_d) best_d = d, best = item.key();
      if (!best.empty()) hint = fmt::format(" (did you mean '{}{}'?)", walked.empty() ? "" : walked + ".", best);
      else if (const std::string elsewhere = find_key(full, part); !elsewhere.empty())
        hint = fmt::format(" (did you mean '{}'?)", elsewhere);
      throw ConfigError(fmt::format("config: unknown key '{}'{}{}", here, hint, context));
    }
    walked = here;
  }

  json value;
  try {
    value = json::parse(raw);
  } catch (const json::parse_error&) {
    value = raw;
  } catch (const json::out_of_range&) {  // 1e400: a number beyond double's range
    throw ConfigError(fmt::format("config: --set {}: the number is beyond the range of a double", text));
  }
  if (value.is_number_float() && value.get<double>() == 0.0) {  // 1e-400 parses as 0: say so rather than run with 0
    const std::string mantissa = raw.substr(0, raw.find_first_of("eE"));
    CONFIG_CHECK(mantissa.find_first_of("123456789") == std::string::npos,
                 "config: --set {}: the number underflows to 0 (below the range of a double)", text);
  }
  static const RunConfig defaults;
  if (!value.is_string() && !value.is_null() && is_string_key(defaults, parts)) value = raw;
  if (node->is_object() && value.is_object())
    node->update(value, /*merge_objects=*/true);
  else
    *node = std::move(value);
}

}  // namespace config_schema

using namespace config_schema;

// ---- public: JSON ---------------------------------------------------------------------------------------------
void to_json(json& j, const RunConfig& c) { j = to_value(c); }
void from_json(const json& j, RunConfig& c) { read_root(j, c, ""); }
void to_json(json& j, const ModelCfg& c) { j = to_value(c); }
void from_json(const json& j, ModelCfg& c) { read_root(j, c, "model"); }
void to_json(json& j, const CheckpointingCfg& c) { j = to_value(c); }
void from_json(const json& j, CheckpointingCfg& c) { read_root(j, c, "checkpointing"); }
void to_json(json& j, const ParallelCfg& c) { j = to_value(c); }
void from_json(const json& j, ParallelCfg& c) { read_root(j, c, "parallel"); }
void to_json(json& j, const OptimizerCfg& c) { j = to_value(c); }
void from_json(const json& j, OptimizerCfg& c) { read_root(j, c, "optimizer"); }
void to_json(json& j, const DataCfg& c) { j = to_value(c); }
void from_json(const json& j, DataCfg& c) { read_root(j, c, "data"); }
void to_json(json& j, const BenchCfg& c) { j = to_value(c); }
void from_json(const json& j, BenchCfg& c) { read_root(j, c, "bench"); }
void to_json(json& j, const InitCfg& c) { j = to_value(c); }
void from_json(const json& j, InitCfg& c) { read_root(j, c, "init"); }
void to_json(json& j, const OutputCfg& c) { j = to_value(c); }
void from_json(const json& j, OutputCfg& c) { read_root(j, c, "output"); }
void to_json(json& j, const ProfileCfg& c) { j = to_value(c); }
void from_json(const json& j, ProfileCfg& c) { read_root(j, c, "profile"); }
void to_json(json& j, const CollectiveCfg& c) { j = to_value(c); }
void from_json(const json& j, CollectiveCfg& c) { read_root(j, c, "collective"); }
void to_json(json& j, const AttentionBenchCfg& c) { j = to_value(c); }
void from_json(const json& j, AttentionBenchCfg& c) { read_root(j, c, "attention_bench"); }

}  // namespace trainer
