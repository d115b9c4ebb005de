// RunConfig: JSON (de)serialisation with key-naming errors, `--set` overrides, resolution of presets and "auto"
// values, validation, and the `--help` text. See config.h for the contract and configs/README.md for every key.
//
// One list of keys per section (the fields() visitors below) drives to_json, from_json, the override paths and the
// help text, so a key added to a struct and to its visitor is serialised, checked and documented everywhere (a unit
// test fails when a key has no documentation row or is missing from configs/README.md).
#include "config/config.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <concepts>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <span>
#include <string_view>
#include <type_traits>

#include "build_info.h"
#include "core/errors.h"
#include "core/memory.h"
#include "io/checkpoint.h"
#include "io/result_record.h"
#include "io/token_data.h"

namespace trainer {
namespace {

namespace fs = std::filesystem;
using Names = std::vector<std::string_view>;

// ---- allowed values (the validation and the help text both read these lists) ---------------------------------
// To add a job (attention_bench, collective_bench), a strategy or a policy, extend its list here.
const Names kJobs{"train", "attention_bench", "collective_bench"};
const Names kDevices{"auto", "cpu", "cuda"};
const Names kPrecisions{"fp32", "bf16", "bf16_pure"};
const Names kAttention{"auto", "naive", "flash2"};
const Names kCheckpointPolicies{"none", "selective", "full", "every_k", "sqrt", "nested"};
const Names kStrategies{"none", "ddp_naive", "ddp_flat", "ddp_overlap", "ddp_bucketed", "zero1", "fsdp"};
const Names kComms{"auto", "nccl", "mpi"};
const Names kReduceDtypes{"fp32", "bf16"};  // the names of `precision`
const Names kSchedules{"constant", "cosine"};
const Names kSources{"random", "tokens"};
const Names kDtypes{"uint16", "uint32"};
const Names kSamplings{"random", "sequential"};
const Names kPhases{"forward", "forward_backward", "train_step"};
const Names kCollectiveOps{"all_reduce", "reduce_scatter", "all_gather"};
const Names kCollectiveDtypes{"f32"};

std::string one_of(const Names& names) { return fmt::format("{}", fmt::join(names, " | ")); }

// ---- the key lists: fields(section, f) calls f("key", member) for every key, in documentation order ----------
template <class S, class T>
concept Is = std::same_as<std::remove_const_t<S>, T>;

template <Is<ModelCfg> S, class F>
void fields(S& m, F&& f) {
  f("preset", m.preset);
  f("vocab_size", m.vocab_size);
  f("context_length", m.context_length);
  f("d_model", m.d_model);
  f("d_ff", m.d_ff);
  f("num_layers", m.num_layers);
  f("num_heads", m.num_heads);
  f("rope_theta", m.rope_theta);
}
template <Is<CheckpointingCfg> S, class F>
void fields(S& c, F&& f) {
  f("policy", c.policy);
  f("k", c.k);
  f("blocks", c.blocks);
  f("lm_head_chunk_tokens", c.lm_head_chunk_tokens);
  f("keep_attention", c.keep_attention);
}
template <Is<ParallelCfg> S, class F>
void fields(S& p, F&& f) {
  f("strategy", p.strategy);
  f("comm", p.comm);
  f("bucket_mb", p.bucket_mb);
  f("reduce_dtype", p.reduce_dtype);
  f("prefetch_layers", p.prefetch_layers);
  f("comm_timeout_s", p.comm_timeout_s);
}
template <Is<OptimizerCfg> S, class F>
void fields(S& o, F&& f) {
  f("lr", o.lr);
  f("betas", o.betas);
  f("eps", o.eps);
  f("weight_decay", o.weight_decay);
  f("max_grad_norm", o.max_grad_norm);
  f("in_backward", o.in_backward);
  f("stochastic_rounding", o.stochastic_rounding);
  f("schedule", o.schedule);
  f("warmup_steps", o.warmup_steps);
  f("cosine_steps", o.cosine_steps);
  f("min_lr", o.min_lr);
}
template <Is<DataCfg> S, class F>
void fields(S& d, F&& f) {
  f("source", d.source);
  f("path", d.path);
  f("dtype", d.dtype);
  f("sampling", d.sampling);
  f("batch_size", d.batch_size);
  f("microbatch_size", d.microbatch_size);
  f("seed", d.seed);
}
template <Is<BenchCfg> S, class F>
void fields(S& b, F&& f) {
  f("phase", b.phase);
  f("warmup_steps", b.warmup_steps);
  f("measure_steps", b.measure_steps);
  f("log_every", b.log_every);
}
template <Is<InitCfg> S, class F>
void fields(S& i, F&& f) {
  f("weights", i.weights);
  f("resume", i.resume);
  f("seed", i.seed);
}
template <Is<OutputCfg> S, class F>
void fields(S& o, F&& f) {
  f("results", o.results);
  f("checkpoint", o.checkpoint);
  f("checkpoint_every", o.checkpoint_every);
}
template <Is<ProfileCfg> S, class F>
void fields(S& p, F&& f) {
  f("nvtx", p.nvtx);
  f("trace", p.trace);
  f("memory_timeline", p.memory_timeline);
}
template <Is<CollectiveCfg> S, class F>
void fields(S& c, F&& f) {
  f("ops", c.ops);
  f("sizes_mb", c.sizes_mb);
  f("warmup", c.warmup);
  f("iters", c.iters);
  f("dtype", c.dtype);
}
template <Is<RunConfig> S, class F>
void fields(S& c, F&& f) {
  f("job", c.job);
  f("name", c.name);
  f("model", c.model);
  f("device", c.device);
  f("precision", c.precision);
  f("allow_tf32", c.allow_tf32);
  f("gemm_autotune", c.gemm_autotune);
  f("attention", c.attention);
  f("cuda_graph", c.cuda_graph);
  f("checkpointing", c.checkpointing);
  f("parallel", c.parallel);
  f("optimizer", c.optimizer);
  f("data", c.data);
  f("bench", c.bench);
  f("init", c.init);
  f("output", c.output);
  f("profile", c.profile);
  f("collective", c.collective);
}

/// A section is a struct with a key list (it serialises as a JSON object).
template <class T>
concept Section = requires(T& t) { fields(t, [](const char*, auto&) {}); };

template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// ---- to_json ------------------------------------------------------------------------------------------------
template <class T>
json to_value(const T& v) {
  if constexpr (Section<T>) {
    json j = json::object();
    fields(v, [&](const char* name, const auto& member) { j[name] = to_value(member); });
    return j;
  } else if constexpr (is_optional<T>::value) {
    return v ? to_value(*v) : json(nullptr);
  } else {
    return json(v);
  }
}

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
  fields(section, [&](const char* name, const auto&) {
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
template <Section S>
void read_section(const json& j, S& s, const std::string& prefix) {
  for (const auto& [k, v] : j.items()) {
    bool found = false;
    fields(s, [&](const char* name, auto& member) {
      if (k != name) return;
      found = true;
      read_value(v, member, prefix + k);
    });
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

/// True when the key path names a string field (std::string or std::optional<std::string>).
template <Section S>
bool is_string_key(const S& s, std::span<const std::string> path) {
  bool result = false;
  fields(s, [&](const char* name, const auto& member) {
    if (path.empty() || path[0] != name) return;
    using T = std::decay_t<decltype(member)>;
    if constexpr (Section<T>)
      result = is_string_key(member, path.subspan(1));
    else
      result = path.size() == 1 && (std::is_same_v<T, std::string> || std::is_same_v<T, std::optional<std::string>>);
  });
  return result;
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
      std::string best, hint;  // the nearest existing key at this level, within 2 edits, as for config files
      size_t best_d = 3;
      if (node->is_object())
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

// ---- resolution -----------------------------------------------------------------------------------------------
void resolve(RunConfig& c, const std::string& path, int world_size, bool cuda_available, const HostInfo& host,
             std::vector<std::string>* warnings) {
  if (!c.model.preset.empty()) {
    const ModelCfg p = preset_model(c.model.preset);
    auto fill = [](int& v, int from) { v = v == 0 ? from : v; };
    fill(c.model.vocab_size, p.vocab_size);
    fill(c.model.context_length, p.context_length);
    fill(c.model.d_model, p.d_model);
    fill(c.model.d_ff, p.d_ff);
    fill(c.model.num_layers, p.num_layers);
    fill(c.model.num_heads, p.num_heads);
  }
  if (c.device == "auto") c.device = cuda_available ? "cuda" : "cpu";
  if (c.attention == "auto") c.attention = c.device == "cuda" && bf16_precision(c.precision) ? "flash2" : "naive";
  const CommChoice comm = resolve_comm(c.parallel.comm, c.device, host);
  c.parallel.comm = comm.comm;
  if (!comm.warning.empty() && warnings) warnings->push_back(comm.warning);
  if (warnings && c.checkpointing.k != CheckpointingCfg{}.k && c.checkpointing.policy != "every_k")
    warnings->push_back(fmt::format("checkpointing.k = {} has no effect: only policy every_k reads it (policy is '{}')",
                                    c.checkpointing.k, c.checkpointing.policy));
  if (c.name.empty()) c.name = path.empty() ? "default" : fs::path(path).stem().string();
  if (c.data.microbatch_size == 0 && world_size > 0) c.data.microbatch_size = c.data.batch_size / world_size;
}

// ---- validation helpers ---------------------------------------------------------------------------------------
void check_enum(const std::string& v, const Names& allowed, const char* key) {
  CONFIG_CHECK(std::find(allowed.begin(), allowed.end(), v) != allowed.end(),
               "config: '{}' must be one of {}; got '{}'", key, fmt::join(allowed, ", "), v);
}
void check_positive(double v, const char* key, std::string_view hint = {}) {
  CONFIG_CHECK(v > 0, "config: '{}' must be > 0, got {}{}", key, v, hint);
}
void check_non_negative(double v, const char* key) {
  CONFIG_CHECK(v >= 0, "config: '{}' must be >= 0, got {}", key, v);
}

/// Whether paths `a` and `b` name the same file: the same inode when both exist (hard links, symlinks), else the
/// same absolute path once the existing part is resolved (symlinked directories, "./", "..").
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  const auto real = [](const std::string& p) {
    std::error_code e;
    const fs::path r = fs::weakly_canonical(fs::absolute(p), e);
    return e ? fs::absolute(p).lexically_normal() : r;
  };
  return real(a) == real(b);
}

/// An existing regular file that this process can open for reading.
void check_readable_file(const std::string& path, const char* key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(fmt::format("config: cannot read '{}' ({}): {}", path, key, std::strerror(errno)));
  struct stat st {};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  CONFIG_CHECK(regular, "config: cannot read '{}' ({}): not a regular file", path, key);
}

// ---- documentation of every key (help_text and configs/README.md) ---------------------------------------------
struct KeyDoc {
  const char* key;
  std::string allowed;
  const char* meaning;
};

const std::vector<KeyDoc>& key_docs() {
  static const std::vector<KeyDoc> docs = {
      {"job", one_of(kJobs), "what to run: train (training loop / step benchmark), attention_bench (naive vs "
                             "flash2 attention grids of CS336 a2) or collective_bench (collective bandwidth table)"},
      {"name", "string", "run name, used in default output names; \"\": the config file's stem (\"default\" for the "
                         "embedded config)"},
      {"model.preset", "\"\" | " + fmt::format("{}", fmt::join(preset_names(), " | ")),
       "named model size (table below); fills every model dim left at 0. \"\": give all dims explicitly"},
      {"model.vocab_size", "integer > 0 (0: preset)", "vocabulary size; token ids are in [0, vocab_size)"},
      {"model.context_length", "integer > 0 (0: preset)", "sequence length T of every row, in tokens"},
      {"model.d_model", "integer > 0 (0: preset)",
       "residual width; divisible by num_heads, d_model/num_heads even (RoPE)"},
      {"model.d_ff", "integer > 0 (0: preset)", "SwiGLU hidden width (w1, w3: [d_ff, d_model])"},
      {"model.num_layers", "integer > 0 (0: preset)", "Transformer blocks"},
      {"model.num_heads", "integer > 0 (0: preset)", "attention heads; d_head = d_model / num_heads"},
      {"model.rope_theta", "number > 0", "RoPE base theta"},
      {"device", one_of(kDevices), "auto: cuda when a GPU is visible, else cpu (the fp32 reference backend)"},
      {"precision", one_of(kPrecisions),
       "bf16: fp32 master weights, grads and optimizer state, bf16 matmuls and activations (cuda only); "
       "bf16_pure: weights, grads and AdamW m, v stored in bf16 as the leaderboard's reference model has them (AdamW "
       "computed in fp32, rounded once; activations bf16 on cuda, fp32 on the cpu backend, which emulates the bf16 "
       "storage)"},
      {"allow_tf32", "true | false", "let fp32 matmuls use TF32 tensor cores (cuda)"},
      {"gemm_autotune", "true | false",
       "cuda: on the first call of each GEMM shape, time cuBLASLt's candidate algorithms and keep the fastest"},
      {"attention", one_of(kAttention), "auto: flash2 for bf16 on cuda, else naive (materialised scores)"},
      {"cuda_graph", "true | false", "capture the training step in a CUDA graph (not implemented yet: must be false)"},
      {"checkpointing.policy", one_of(kCheckpointPolicies),
       "what each block keeps for its backward: none (everything), selective (all but the RMSNorm outputs and the "
       "SwiGLU product, recomputed in backward), full (only its input; the block is recomputed), every_k (one "
       "input per segment of k blocks; the segment is recomputed), sqrt (every_k with k = round(sqrt(num_layers))), "
       "nested (recursive halving: O(log L) inputs kept, O(L log L) block recomputes)"},
      {"checkpointing.k", "integer >= 1", "every_k: blocks per recomputed segment"},
      {"checkpointing.blocks", "null | array of block indices",
       "only these blocks are checkpointed (the others keep what selective keeps, or everything under none); "
       "full / none / selective: each listed block is recomputed on its own; every_k / sqrt / nested: consecutive "
       "listed blocks are grouped by the policy. null: every block under full / every_k / sqrt / nested, none under "
       "none / selective"},
      {"checkpointing.keep_attention", "true | false",
       "recomputed (checkpointed) blocks also keep attention's output O [N, d_model] and logsumexp from the "
       "forward, so their recompute runs the GEMMs but not the attention forward (at long context about half of a "
       "block's forward) for N x d_model activations more per checkpointed block; changes no number"},
      {"checkpointing.lm_head_chunk_tokens", "integer >= 0",
       "tokens per chunk of the fused LM head + cross-entropy (logits, loss and their gradients in one pass); "
       "0: auto, the largest multiple of 128 whose logits take at most 768 MiB"},
      {"parallel.strategy", one_of(kStrategies),
       "how gradients (and optimizer state) are shared between ranks; fsdp also shards the weights (each rank keeps "
       "1/N of every unit, all-gathered before use)"},
      {"parallel.comm", one_of(kComms), "communicator; auto: nccl on cuda with a GPU per rank (in a build with NCCL), else mpi"},
      {"parallel.bucket_mb", "number > 0", "ddp_bucketed bucket size, MiB of fp32 gradients"},
      {"parallel.reduce_dtype", one_of(kReduceDtypes),
       "ddp_*: dtype of the gradients summed over ranks; bf16 halves the bytes (needs comm nccl)"},
      {"parallel.prefetch_layers", "integer >= 0",
       "fsdp: units (embedding, blocks, head) whose weight shards are all-gathered ahead of their use; "
       "prefetch_layers + 1 gather buffers"},
      {"parallel.comm_timeout_s", "number > 0", "a collective not done after this many seconds aborts every rank"},
      {"optimizer.lr", "number >= 0", "peak learning rate of AdamW"},
      {"optimizer.betas", "[beta1, beta2], each in [0, 1)", "AdamW moment decay rates"},
      {"optimizer.eps", "number > 0", "AdamW denominator epsilon"},
      {"optimizer.weight_decay", "number >= 0", "decoupled weight decay (p -= lr*wd*p), applied to every parameter"},
      {"optimizer.max_grad_norm", "null | number > 0", "clip the global gradient L2 norm to this; null: no clipping"},
      {"optimizer.in_backward", "true | false",
       "AdamW updates each unit (embedding, block, head) as soon as its gradient is final, during the backward; "
       "each unit's gradient then exists only from its backward to its update (strategy none, no clipping)"},
      {"optimizer.stochastic_rounding", "true | false",
       "bf16_pure: round each updated weight up or down at random in proportion (unbiased; deterministic in "
       "init.seed, the step and the element) instead of to nearest; m and v are rounded to nearest"},
      {"optimizer.schedule", one_of(kSchedules), "cosine: linear warm-up to lr, cosine decay to min_lr"},
      {"optimizer.warmup_steps", "integer >= 0", "warm-up iterations of the schedule"},
      {"optimizer.cosine_steps", "integer >= 0 (>= warmup_steps)", "end of the cosine cycle; 0: the run's total steps"},
      {"optimizer.min_lr", "number >= 0", "learning rate after the cosine cycle"},
      {"data.source", one_of(kSources), "random: seeded uniform token ids; tokens: a flat binary token file"},
      {"data.path", "null | file path", "token file (needed for source tokens): ids < vocab_size, >= context_length+1 "
                                        "tokens"},
      {"data.dtype", one_of(kDtypes), "element type of the token file (little-endian)"},
      {"data.sampling", one_of(kSamplings),
       "random windows; sequential: row i of step s starts at ((s*rows + i) * T) mod (n - T)"},
      {"data.batch_size", "integer > 0, divisible by the world size", "global batch in rows of context_length tokens"},
      {"data.microbatch_size", "integer >= 0, divides the per-rank batch",
       "rows per forward/backward on one rank (gradient accumulation); 0: the whole per-rank batch"},
      {"data.seed", "integer >= 0", "seed of the random tokens and of random sampling"},
      {"bench.phase", one_of(kPhases), "what each timed step runs"},
      {"bench.warmup_steps", "integer >= 0", "steps before timing starts (they train too)"},
      {"bench.measure_steps", "integer >= 0 (warmup + measure >= 1)", "timed steps"},
      {"bench.log_every", "integer >= 0", "progress line every N steps; 0: none"},
      {"init.weights", "null | readable file", "safetensors file to start from; null: random init with init.seed"},
      {"init.resume", "null | checkpoint directory",
       "continue the run saved in this output.checkpoint directory (its 'latest' checkpoint, or a step-N directory "
       "inside it): weights, AdamW state, step, learning-rate schedule and data position; bench.warmup_steps + "
       "measure_steps is the whole run's length, counted from step 0; any strategy and world size; not with "
       "init.weights"},
      {"init.seed", "integer >= 0", "seed of the random initialisation"},
      {"output.results", "null | writable path", "result record; null: results/runs/{name}-{YYYYmmdd-HHMMSS}-{pid}.json"},
      {"output.checkpoint", "null | writable directory",
       "training checkpoint directory, written at the end (and every checkpoint_every steps): weights (DIR/"
       "model.safetensors, for init.weights), AdamW state per rank, step and config, for init.resume; crash-safe "
       "(the previous checkpoint stays until the new one is complete); it may be init.resume's directory; null: none"},
      {"output.checkpoint_every", "integer >= 0", "also write output.checkpoint every N steps; 0: only at the end"},
      {"profile.nvtx", "true | false", "NVTX ranges around layers and phases (for Nsight Systems)"},
      {"profile.trace", "null | writable path", "Chrome trace (chrome://tracing, Perfetto) of the measured steps of job train: phases, blocks, ops and collectives on the GPU timeline; one file for all ranks"},
      {"profile.memory_timeline", "null | writable path", "job train: every allocation and free (bytes, category, phase, block, time) as JSON for launch/plot_memory.py; rank r > 0 writes PATH with .rank<r> before the extension"},
      {"collective.ops", "non-empty array of " + one_of(kCollectiveOps), "collective_bench: collectives to time"},
      {"collective.sizes_mb", "non-empty array of numbers > 0",
       "collective_bench: MiB of the whole array (nccl-tests size; reduce_scatter input, all_gather output)"},
      {"collective.warmup", "integer >= 0", "collective_bench: untimed operations per size"},
      {"collective.iters", "integer >= 1", "collective_bench: timed operations per size (time = their mean)"},
      {"collective.dtype", one_of(kCollectiveDtypes), "collective_bench: element type"},
  };
  return docs;
}

/// Every leaf key of a section in documentation order, with its default as JSON text.
template <Section S>
void leaf_defaults(const S& s, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  fields(s, [&](const char* name, const auto& member) {
    using T = std::decay_t<decltype(member)>;
    if constexpr (Section<T>)
      leaf_defaults(member, prefix + name + ".", out);
    else
      out.emplace_back(prefix + name, to_value(member).dump());
  });
}

}  // namespace

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

// ---- public: load and validate --------------------------------------------------------------------------------
CommChoice resolve_comm(const std::string& comm, const std::string& device, const HostInfo& host) {
  const bool shared = device == "cuda" && host.cuda_devices > 0 && host.local_size > host.cuda_devices;
  const std::string sharing = fmt::format("{} ranks share {} GPU(s) on this host", host.local_size, host.cuda_devices);
  if (comm == "auto") {
    if (device != "cuda") return {"mpi", ""};
    if (!host.nccl)
      return {"mpi", fmt::format("parallel.comm: auto resolves to mpi: {}", build::kNoNcclHint)};
    if (!shared) return {"nccl", ""};
    return {"mpi", fmt::format("parallel.comm: auto resolves to mpi, not nccl: {} (NCCL needs a GPU per rank)",
                               sharing)};
  }
  // (on the cpu, validation's "comm 'nccl' needs device 'cuda'" is the message that helps)
  CONFIG_CHECK(comm != "nccl" || host.nccl || device != "cuda",
               "parallel.comm: 'nccl' is not available: {}; use parallel.comm=mpi",
               build::kNoNcclHint);
  CONFIG_CHECK(comm != "nccl" || !shared,
               "parallel.comm: 'nccl' needs a GPU per rank, but {} (NCCL would fail or hang); use parallel.comm=mpi",
               sharing);
  return {comm, ""};
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                      bool cuda_available, const HostInfo& host, std::vector<std::string>* warnings) {
  TRAINER_CHECK(world_size >= 1, "load_config: world_size {} < 1", world_size);
  const std::string text = path.empty() ? std::string(build::kDefaultConfig) : read_text_file(path);
  const json doc = parse_config_text(text, path.empty() ? "<embedded default config>" : path);

  RunConfig c;
  from_json(doc, c);  // unknown keys and wrong types in the file
  if (!overrides.empty()) {
    json full = c;  // every key present, so an override path that does not exist is an unknown key
    for (const auto& o : overrides) apply_override(full, o);
    RunConfig overridden;
    from_json(full, overridden);  // wrong types given by an override
    c = std::move(overridden);
  }
  resolve(c, path, world_size, cuda_available, host, warnings);
  validate_config(c, world_size, path);
  if (warnings) check_resume(c, warnings);  // what the resume changes (validate_config checked the rest)
  return c;
}

void validate_config(const RunConfig& c, int world_size, const std::string& config_path) {
  TRAINER_CHECK(world_size >= 1, "validate_config: world_size {} < 1", world_size);
  check_enum(c.job, kJobs, "job");

  // model
  const ModelCfg& m = c.model;
  if (!m.preset.empty()) preset_model(m.preset);  // raises for an unknown name
  const std::string_view hint = m.preset.empty() ? " (set it, or choose a model.preset)" : "";
  check_positive(m.vocab_size, "model.vocab_size", hint);
  check_positive(m.context_length, "model.context_length", hint);
  check_positive(m.d_model, "model.d_model", hint);
  check_positive(m.d_ff, "model.d_ff", hint);
  check_positive(m.num_layers, "model.num_layers", hint);
  check_positive(m.num_heads, "model.num_heads", hint);
  check_positive(m.rope_theta, "model.rope_theta");
  CONFIG_CHECK(m.d_model % m.num_heads == 0, "model: d_model {} is not divisible by num_heads {}", m.d_model,
               m.num_heads);
  const int d_head = m.d_model / m.num_heads;
  CONFIG_CHECK(d_head % 2 == 0, "model: d_head {} (d_model {} / num_heads {}) must be even: RoPE rotates pairs",
               d_head, m.d_model, m.num_heads);

  // device and numerics
  check_enum(c.device, kDevices, "device");
  check_enum(c.precision, kPrecisions, "precision");
  check_enum(c.attention, kAttention, "attention");
  CONFIG_CHECK(c.precision != "bf16" || c.device == "cuda",
               "precision: bf16 needs device 'cuda' (the CPU backend is the fp32 reference; bf16_pure runs there with "
               "fp32 activations)");
  CONFIG_CHECK(!bf16_storage(c.precision) || c.parallel.strategy == "none",
               "precision: bf16_pure supports parallel.strategy 'none' (one rank) for now, got '{}'; use precision "
               "bf16 (fp32 master) with the data-parallel strategies and fsdp", c.parallel.strategy);
  CONFIG_CHECK(!c.optimizer.stochastic_rounding || bf16_storage(c.precision),
               "optimizer: stochastic_rounding applies to precision bf16_pure (bf16 weights), got precision '{}'",
               c.precision);
  CONFIG_CHECK(!c.cuda_graph || c.device == "cuda", "cuda_graph: needs device 'cuda', got device '{}'", c.device);
  CONFIG_CHECK(!c.cuda_graph, "cuda_graph: capturing the step in a CUDA graph is not implemented yet; set false");

  // checkpointing and parallel
  check_enum(c.checkpointing.policy, kCheckpointPolicies, "checkpointing.policy");
  CONFIG_CHECK(c.checkpointing.k >= 1, "config: 'checkpointing.k' must be >= 1, got {}", c.checkpointing.k);
  check_non_negative(c.checkpointing.lm_head_chunk_tokens, "checkpointing.lm_head_chunk_tokens");
  if (c.checkpointing.blocks) {
    std::vector<int> seen;
    for (int b : *c.checkpointing.blocks) {
      CONFIG_CHECK(b >= 0 && b < c.model.num_layers,
                   "config: 'checkpointing.blocks' lists block {}, outside [0, {}) (model.num_layers {})", b,
                   c.model.num_layers, c.model.num_layers);
      CONFIG_CHECK(std::find(seen.begin(), seen.end(), b) == seen.end(),
                   "config: 'checkpointing.blocks' lists block {} twice", b);
      seen.push_back(b);
    }
  }
  const ParallelCfg& p = c.parallel;
  check_enum(p.strategy, kStrategies, "parallel.strategy");
  check_enum(p.comm, kComms, "parallel.comm");
  CONFIG_CHECK(p.comm != "nccl" || c.device == "cuda", "parallel: comm 'nccl' needs device 'cuda' (use comm 'mpi')");
  check_positive(p.bucket_mb, "parallel.bucket_mb");
  check_enum(p.reduce_dtype, kReduceDtypes, "parallel.reduce_dtype");
  CONFIG_CHECK(p.reduce_dtype == "fp32" || p.strategy.rfind("ddp_", 0) == 0,
               "parallel: reduce_dtype 'bf16' applies to the ddp_* strategies, got strategy '{}'", p.strategy);
  CONFIG_CHECK(p.reduce_dtype == "fp32" || (c.device == "cuda" && p.comm != "mpi"),
               "parallel: reduce_dtype 'bf16' needs comm 'nccl' (MPI has no bf16 sum), got device '{}' comm '{}'",
               c.device, p.comm);
  check_non_negative(p.prefetch_layers, "parallel.prefetch_layers");
  check_positive(p.comm_timeout_s, "parallel.comm_timeout_s");

  // optimizer
  const OptimizerCfg& o = c.optimizer;
  check_non_negative(o.lr, "optimizer.lr");
  CONFIG_CHECK(o.betas.size() == 2, "config: 'optimizer.betas' must have 2 entries [beta1, beta2], got {}",
               o.betas.size());
  for (size_t i = 0; i < 2; ++i)
    CONFIG_CHECK(o.betas[i] >= 0 && o.betas[i] < 1, "config: 'optimizer.betas[{}]' must be in [0, 1), got {}", i,
                 o.betas[i]);
  check_positive(o.eps, "optimizer.eps");
  check_non_negative(o.weight_decay, "optimizer.weight_decay");
  if (o.max_grad_norm) check_positive(*o.max_grad_norm, "optimizer.max_grad_norm");
  CONFIG_CHECK(!o.in_backward || !o.max_grad_norm,
               "optimizer: in_backward updates each unit before the global gradient norm is known, so it cannot clip; "
               "set optimizer.max_grad_norm null or in_backward false");
  CONFIG_CHECK(!o.in_backward || c.parallel.strategy == "none",
               "optimizer: in_backward is implemented for parallel.strategy 'none', got '{}'", c.parallel.strategy);
  check_enum(o.schedule, kSchedules, "optimizer.schedule");
  check_non_negative(o.warmup_steps, "optimizer.warmup_steps");
  check_non_negative(o.cosine_steps, "optimizer.cosine_steps");
  check_non_negative(o.min_lr, "optimizer.min_lr");
  CONFIG_CHECK(o.schedule != "cosine" || o.cosine_steps == 0 || o.warmup_steps <= o.cosine_steps,
               "optimizer: warmup_steps {} exceeds cosine_steps {}", o.warmup_steps, o.cosine_steps);

  // data
  const DataCfg& d = c.data;
  check_enum(d.source, kSources, "data.source");
  check_enum(d.dtype, kDtypes, "data.dtype");
  check_enum(d.sampling, kSamplings, "data.sampling");
  check_positive(d.batch_size, "data.batch_size");
  if (c.job == "train") {  // only the train job splits the batch over the ranks
    CONFIG_CHECK(d.batch_size % world_size == 0, "data: batch_size {} is not divisible by world_size {}",
                 d.batch_size, world_size);
    check_positive(d.microbatch_size, "data.microbatch_size");
    const int per_rank = d.batch_size / world_size;
    CONFIG_CHECK(per_rank % d.microbatch_size == 0,
                 "data: per-rank batch {} (batch_size {} / world_size {}) is not divisible by microbatch_size {}",
                 per_rank, d.batch_size, world_size, d.microbatch_size);
  }

  // collective_bench
  const CollectiveCfg& cc = c.collective;
  CONFIG_CHECK(!cc.ops.empty(), "config: 'collective.ops' must name at least one of {}", one_of(kCollectiveOps));
  for (size_t i = 0; i < cc.ops.size(); ++i)
    check_enum(cc.ops[i], kCollectiveOps, fmt::format("collective.ops[{}]", i).c_str());
  CONFIG_CHECK(!cc.sizes_mb.empty(), "config: 'collective.sizes_mb' must hold at least one size");
  for (size_t i = 0; i < cc.sizes_mb.size(); ++i)
    check_positive(cc.sizes_mb[i], fmt::format("collective.sizes_mb[{}]", i).c_str());
  check_non_negative(cc.warmup, "collective.warmup");
  CONFIG_CHECK(cc.iters >= 1, "config: 'collective.iters' must be >= 1, got {}", cc.iters);
  check_enum(cc.dtype, kCollectiveDtypes, "collective.dtype");

  // bench
  const BenchCfg& b = c.bench;
  check_enum(b.phase, kPhases, "bench.phase");
  check_non_negative(b.warmup_steps, "bench.warmup_steps");
  check_non_negative(b.measure_steps, "bench.measure_steps");
  CONFIG_CHECK(int64_t(b.warmup_steps) + b.measure_steps >= 1,
               "bench: warmup_steps + measure_steps must be at least one step, got {} + {}", b.warmup_steps,
               b.measure_steps);
  CONFIG_CHECK(int64_t(b.warmup_steps) + b.measure_steps <= 1000000000,
               "bench: warmup_steps + measure_steps must be at most 1e9, got {} + {}", b.warmup_steps,
               b.measure_steps);
  check_non_negative(b.log_every, "bench.log_every");
  CONFIG_CHECK(c.job != "train" || c.parallel.strategy != "none" || world_size == 1,
               "parallel.strategy: 'none' runs one process, but {} ranks were started (use ddp_naive, ddp_flat, "
               "ddp_overlap, ddp_bucketed, zero1 or fsdp)", world_size);
  CONFIG_CHECK(!c.profile.trace || c.job == "train",
               "profile.trace: only job 'train' records Chrome traces (job is '{}'); remove the key or set null", c.job);
  CONFIG_CHECK(!c.profile.memory_timeline || c.job == "train",
               "profile.memory_timeline: only job 'train' logs its allocations (job is '{}'); remove the key or set "
               "null", c.job);

  // files: inputs first, then outputs (check_output_path creates directories, so it runs only for a valid config)
  if (d.source == "tokens") {
    CONFIG_CHECK(d.path && !d.path->empty(), "data: source 'tokens' needs data.path (a flat binary token file)");
    check_token_file(*d.path, d.dtype, m.vocab_size, m.context_length);
  }
  if (c.init.weights) check_readable_file(*c.init.weights, "init.weights");
  check_non_negative(c.output.checkpoint_every, "output.checkpoint_every");
  CONFIG_CHECK(c.output.checkpoint_every == 0 || c.output.checkpoint,
               "output.checkpoint_every: {} needs output.checkpoint (the directory to write to)",
               c.output.checkpoint_every);
  CONFIG_CHECK(!c.output.checkpoint || c.job == "train", "output.checkpoint: only job 'train' writes checkpoints "
               "(job is '{}'); remove the key or set null", c.job);
  if (c.init.resume) {
    CONFIG_CHECK(!c.init.resume->empty(), "init.resume: the path is empty (remove the key or set null)");
    check_resume(c);  // a complete checkpoint of this model and precision, with steps left to run
  }

  const std::pair<const char*, const std::optional<std::string>*> outputs[] = {
      {"output.results", &c.output.results},
      {"output.checkpoint", &c.output.checkpoint},
      {"profile.trace", &c.profile.trace},
      {"profile.memory_timeline", &c.profile.memory_timeline}};
  for (const auto& [key, value] : outputs)  // before any path arithmetic: fs::absolute("") throws
    CONFIG_CHECK(!*value || !(*value)->empty(), "{}: the output path is empty (remove the key or set null)", key);
  for (size_t i = 0; i < std::size(outputs); ++i) {
    if (!*outputs[i].second) continue;
    for (size_t k = 0; k < i; ++k)
      if (*outputs[k].second)
        CONFIG_CHECK(!same_file(**outputs[i].second, **outputs[k].second),
                     "output: '{}' and '{}' name the same file '{}'", outputs[k].first, outputs[i].first,
                     **outputs[i].second);
    // Ranks r > 0 write their memory timelines beside rank 0's (memory_timeline_path): those names must not be taken.
    if (outputs[i].second == &c.profile.memory_timeline)
      for (int r = 1; r < std::min(world_size, 4096); ++r)
        for (size_t k = 0; k < std::size(outputs); ++k)
          if (k != i && *outputs[k].second)
            CONFIG_CHECK(!same_file(memory_timeline_path(**outputs[i].second, r), **outputs[k].second),
                         "output: rank {}'s memory timeline '{}' (profile.memory_timeline) is also '{}'", r,
                         memory_timeline_path(**outputs[i].second, r), outputs[k].first);
    // An output must never overwrite an input: the config file, the token file, the initial weights.
    const std::pair<const char*, std::optional<std::string>> inputs[] = {
        {"the config file", config_path.empty() ? std::nullopt : std::optional<std::string>(config_path)},
        {"data.path", d.source == "tokens" ? d.path : std::nullopt},
        {"init.weights", c.init.weights}};
    const int ranks = outputs[i].second == &c.profile.memory_timeline ? std::min(world_size, 4096) : 1;
    for (const auto& [in_key, in_value] : inputs)
      for (int r = 0; in_value && r < ranks; ++r) {
        const std::string out = r == 0 ? **outputs[i].second : memory_timeline_path(**outputs[i].second, r);
        CONFIG_CHECK(!same_file(out, *in_value), "{}: '{}'{} is also the input {} ('{}'); the run would overwrite it",
                     outputs[i].first, out, r == 0 ? "" : fmt::format(" (rank {}'s file)", r), in_key, *in_value);
      }
  }
  // check_output_path creates nothing (the writers make missing directories), so a rejected config leaves no trace.
  if (c.output.checkpoint) {  // a directory: its files are checked like any output file
    CONFIG_CHECK(fs::path(*c.output.checkpoint).extension() != ".safetensors",
                 "output.checkpoint: '{}' looks like a file, but it names a directory now (the weights go to "
                 "DIR/model.safetensors); give a directory", *c.output.checkpoint);
    check_output_path((fs::path(*c.output.checkpoint) / "latest").string(), "output.checkpoint");
  }
  for (const auto& [key, value] : outputs)
    if (*value && value != &c.output.checkpoint) check_output_path(**value, key);
  if (!c.output.results) check_output_path(default_results_path(c.name), "output.results");
}

// ---- public: help ---------------------------------------------------------------------------------------------
bool bf16_precision(const std::string& precision) { return precision == "bf16" || precision == "bf16_pure"; }
bool bf16_storage(const std::string& precision) { return precision == "bf16_pure"; }

std::string help_text() {
  std::string s =
      "usage: trainer [CONFIG.json] [--set key.path=value ...] [--print-config] [--log-all-ranks]\n"
      "       trainer --plan [CONFIG.json] [--set ...] [--world-size N] [--device cpu|cuda] [--json]\n"
      "       trainer --help | --version\n"
      "       mpirun -np N trainer CONFIG.json ...     (one process per GPU; batch_size is split over the N ranks)\n"
      "\n"
      "Trains or benchmarks the CS336 Transformer LM as described by one JSON run config and writes a result\n"
      "record. Without CONFIG.json the embedded default (configs/default.json) is used. Unknown keys are errors.\n"
      "\n"
      "options:\n"
      "  --set key.path=value  override one config key (repeatable, applied in order). The value is JSON\n"
      "                        (3e-4, true, null, [0.9,0.95], {\"num_layers\":2}), else taken as a string;\n"
      "                        array elements by index: --set optimizer.betas.1=0.95\n"
      "  --print-config        print the resolved config as JSON and exit\n"
      "  --log-all-ranks       log on every rank (default: rank 0 at info, other ranks at warn)\n"
      "  --plan                run nothing: print the memory plan (bytes by category at the peak, the peak's\n"
      "                        phase and block), FLOPs and predicted step time of one rank of the train run,\n"
      "                        from a dry run of the real code on a meta backend (no GPU needed)\n"
      "  --world-size N        (--plan) plan for N ranks (default 1, or the mpirun world size)\n"
      "  --device cpu|cuda     (--plan) the device to plan for; default: the config's device, and for device\n"
      "                        auto cuda when the config asks for bf16 or flash2, else cpu\n"
      "  --json                (--plan) print the plan as one JSON object\n"
      "  --help                print this text and exit\n"
      "  --version             print the version and git commit and exit\n"
      "\n"
      "config keys (key, default, allowed values; configs/README.md has the same table):\n";
  std::vector<std::pair<std::string, std::string>> leaves;
  const RunConfig defaults;
  leaf_defaults(defaults, "", leaves);
  std::string section;
  for (const auto& [key, def] : leaves) {
    const auto it = std::find_if(key_docs().begin(), key_docs().end(), [&](const KeyDoc& d) { return key == d.key; });
    TRAINER_CHECK(it != key_docs().end(), "help_text: config key '{}' has no documentation row", key);
    const std::string sec = key.find('.') == std::string::npos ? "" : key.substr(0, key.find('.'));
    if (sec != section) s += "\n";
    section = sec;
    s += fmt::format("  {:<26} {:<14} {}\n      {}\n", key, def, it->allowed, it->meaning);
  }
  s += "\nmodel presets (vocab, context, d_model, d_ff, layers, heads):\n";
  for (const auto& name : preset_names()) {
    const ModelCfg p = preset_model(name);
    s += fmt::format("  {:<16} {:>6} {:>6} {:>5} {:>6} {:>3} {:>3}\n", name, p.vocab_size, p.context_length, p.d_model,
                     p.d_ff, p.num_layers, p.num_heads);
  }
  s += "\nresolution: device auto -> cuda if available else cpu; attention auto -> flash2 for bf16 on cuda else\n"
       "naive; parallel.comm auto -> nccl on cuda with a GPU per rank in a build with NCCL, else mpi (with a\n"
       "warning when ranks share a GPU or NCCL is absent: trainer --version says); name \"\" -> config file stem; data.microbatch_size 0 ->\n"
       "batch_size / world_size. Config errors exit with code 2 before any output is written.\n"
       "\nexit codes: 0 ok; 1 the run failed (record status \"error\"); 2 bad input (one line, nothing written);\n"
       "3 out of memory (\"oom\"); 4 interrupted: SIGINT, SIGTERM, SIGUSR1 or SIGUSR2 (Slurm --signal=USR1@SECONDS)\n"
       "stop job train after the current step on every rank, output.checkpoint is written and the record gets\n"
       "status \"interrupted\"; a second signal stops at once (128 + signal). While a run is going its record\n"
       "says \"running\" (with the pid); the end of the run replaces it.\n";
  return s;
}

}  // namespace trainer
