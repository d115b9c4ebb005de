// Training checkpoint directories: see checkpoint.h for the layout and the crash-safety argument.
#include "io/checkpoint.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "core/errors.h"
#include "io/checksum.h"
#include "io/result_record.h"
#include "io/safetensors.h"

namespace trainer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kWeights = "model.safetensors";

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

/// fsync of a directory (makes renames and new entries durable); best effort, as write_file_atomic does.
void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

bool is_step_name(const std::string& n) { return n.rfind("step-", 0) == 0; }

}  // namespace

std::string checkpoint_step_name(int64_t step) { return fmt::format("step-{:08d}", step); }

std::string fnv1a64_hex(const std::string& text) { return fmt::format("fnv1a64:{:016x}", fnv1a64(text)); }

std::string resolve_checkpoint(const std::string& dir) {
  std::error_code ec;
  CONFIG_CHECK(fs::is_directory(dir, ec), "init.resume: '{}' is not a checkpoint directory ({})", dir,
               fs::exists(dir, ec) ? "not a directory" : "it does not exist");
  if (fs::is_regular_file(fs::path(dir) / kManifest, ec)) return dir;
  const std::string latest = (fs::path(dir) / kLatest).string();
  const std::string name = trim(read_text(latest));
  CONFIG_CHECK(!name.empty(), "init.resume: '{}' holds no complete checkpoint ({})", dir,
               fs::exists(latest, ec) ? fmt::format("its '{}' file is empty or unreadable", kLatest)
                                      : fmt::format("no '{}' file naming one", kLatest));
  CONFIG_CHECK(name.find('/') == std::string::npos && name != "." && name != "..",
               "init.resume: '{}' names '{}', not a checkpoint directory inside '{}'", latest, name, dir);
  const std::string step_dir = (fs::path(dir) / name).string();
  CONFIG_CHECK(fs::is_directory(step_dir, ec), "init.resume: '{}' names '{}', which does not exist in '{}'", latest,
               name, dir);
  CONFIG_CHECK(fs::is_regular_file(fs::path(step_dir) / kManifest, ec),
               "init.resume: checkpoint '{}' is incomplete (no {}; a write that did not finish?)", step_dir,
               kManifest);
  return step_dir;
}

std::string resume_step_dir(const RunConfig& c) {
  TRAINER_CHECK(c.init.resume.has_value(), "resume_step_dir: no init.resume");
  return c.init.resume_step_dir.empty() ? resolve_checkpoint(*c.init.resume) : c.init.resume_step_dir;
}

std::string checkpoint_weights_path(const std::string& step_dir) { return (fs::path(step_dir) / kWeights).string(); }

json read_checkpoint_manifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / kManifest).string();
  const std::string text = read_text(path);
  CONFIG_CHECK(!text.empty(), "init.resume: cannot read '{}'", path);
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("init.resume: '{}' is not valid JSON ({})", path, e.what()));
  }
  CONFIG_CHECK(m.is_object() && m.value("format", "") == kCheckpointFormat,
               "init.resume: '{}' is not a {} manifest", path, kCheckpointFormat);
  for (const char* k : {"step", "config", "optimizer", "weights"})
    CONFIG_CHECK(m.contains(k), "init.resume: '{}' has no '{}' (corrupt checkpoint)", path, k);
  // The fields a resume reads, by type (a hand-edited or damaged manifest gets this line, not a JSON type error)
  auto corrupt = [&](const std::string& what) {
    return ConfigError(fmt::format("init.resume: '{}': {} (corrupt checkpoint)", path, what));
  };
  auto count = [](const json& j) {  // a whole number from 0 to INT64_MAX
    return j.is_number_integer() && (j.is_number_unsigned() ? j.get<uint64_t>() <= uint64_t(INT64_MAX)
                                                              : j.get<int64_t>() >= 0);
  };
  if (!count(m["step"])) throw corrupt(fmt::format("'step' is {}, not a whole number >= 0", m["step"].dump()));
  const int64_t step = m["step"].get<int64_t>();
  if (!m["config"].is_object() || !m["config"].contains("model") || !m["config"]["model"].is_object())
    throw corrupt("'config' is not a run config with a 'model' object");
  for (const char* k : {"init", "optimizer", "data", "parallel", "checkpointing"})  // sections the resume compares
    if (m["config"].contains(k) && !m["config"][k].is_object())
      throw corrupt(fmt::format("'config.{}' is not an object", k));
  if (m.contains("world_size") && !count(m["world_size"])) throw corrupt("'world_size' is not a whole number");
  for (const char* k : {"strategy", "config_hash", "precision"})
    if (m.contains(k) && !m[k].is_string()) throw corrupt(fmt::format("'{}' is not a string", k));
  for (const char* k : {"schedule", "data"})
    if (m.contains(k) && !m[k].is_object()) throw corrupt(fmt::format("'{}' is not an object", k));
  if (!m["optimizer"].is_object()) throw corrupt("'optimizer' is not an object");
  if (const json& t = m["optimizer"].value("steps_taken", json(0)); !count(t) || t.get<int64_t>() > step)
    throw corrupt(fmt::format("'optimizer.steps_taken' is {}, not a whole number from 0 to the step, {}", t.dump(),
                              step));
  if (!m["optimizer"].contains("shards") || !m["optimizer"]["shards"].is_array())
    throw corrupt("'optimizer.shards' is not a list");
  if (m.contains("layout_total") && !count(m["layout_total"])) throw corrupt("'layout_total' is not a whole number");
  if (m.contains("files")) {
    if (!m["files"].is_object()) throw corrupt("'files' is not an object");
    auto hex = [](const json& j) { return j.is_string() && is_crc32_hex(j.get<std::string>()); };
    for (const auto& [name, f] : m["files"].items()) {
      // block_bytes and block_crc32 together, or neither (a whole-file CRC only: this format's first form)
      const bool blocks = f.is_object() && (f.contains("block_bytes") || f.contains("block_crc32"));
      bool ok = f.is_object() && count(f.value("bytes", json())) && hex(f.value("crc32", json())) &&
                (!blocks || (count(f.value("block_bytes", json())) && f["block_bytes"].get<int64_t>() > 0 &&
                             f.value("block_crc32", json()).is_array()));
      if (ok && blocks) {
        const uint64_t bytes = f["bytes"].get<uint64_t>(), bb = f["block_bytes"].get<uint64_t>();
        ok = f["block_crc32"].size() == (bytes + bb - 1) / bb &&
             std::all_of(f["block_crc32"].begin(), f["block_crc32"].end(), hex);
      }
      if (!ok)
        throw corrupt(fmt::format("'files.{}' is not {{\"bytes\": a whole number, \"crc32\": 8 hex digits, "
                                  "\"block_bytes\": a whole number > 0, \"block_crc32\": 8 hex digits for each "
                                  "block}}", name));
    }
  }
  for (const char* section : {"schedule", "data"})
    if (m.contains(section) && m[section].is_object() && m[section].contains("next_step") &&
        m[section]["next_step"] != m["step"])
      throw corrupt(fmt::format("'{}.next_step' is {}, not the step, {}", section, m[section]["next_step"].dump(),
                                step));
  return m;
}

json checkpoint_file_entry(const FileDigest& written) {
  json blocks = json::array();
  for (const auto& [k, crc] : written.blocks) blocks.push_back(crc);
  return {{"bytes", written.bytes}, {"crc32", written.crc32}, {"block_bytes", written.block_bytes},
          {"block_crc32", blocks}};
}

CheckpointRead checkpoint_read_of(const json& m, const std::string& name) {
  const json entry = m.contains("files") ? m["files"].value(name, json()) : json();
  if (!entry.is_object()) return {};  // no checksums, or none for this file (verify_checkpoint_file says so)
  if (!entry.contains("block_bytes")) return {kChecksumBlockBytes, true};
  return {entry["block_bytes"].get<uint64_t>(), false};
}

bool verify_checkpoint_file(const json& m, const std::string& step_dir, const std::string& name,
                            const FileDigest& got) {
  if (!m.contains("files")) return false;
  const std::string path = (fs::path(step_dir) / name).string();
  CONFIG_CHECK(m["files"].contains(name), "init.resume: '{}/{}' lists no checksum for '{}' (corrupt checkpoint)",
               step_dir, kManifest, name);
  const json& f = m["files"][name];
  const uint64_t bytes = f["bytes"].get<uint64_t>();
  CONFIG_CHECK(got.bytes == bytes,
               "init.resume: '{}' has {} bytes, its manifest records {}: the file was truncated or replaced after "
               "the checkpoint was written; {}", path, got.bytes, bytes, kResumeElsewhere);
  auto lower = [](std::string h) {
    std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return h;
  };
  auto check = [&](const std::string& have, const std::string& want, const std::string& where) {
    CONFIG_CHECK(have == want,
                 "init.resume: '{}' does not match its checksum{} (CRC-32 {}, the manifest records {}): the file was "
                 "damaged or changed after the checkpoint was written; {}", path, where, have, want, kResumeElsewhere);
  };
  if (!got.crc32.empty()) check(got.crc32, lower(f["crc32"].get<std::string>()), "");
  if (!f.contains("block_crc32")) {  // a whole-file CRC only: the caller read the whole file (the resume does)
    CONFIG_CHECK(!got.crc32.empty() || got.blocks.empty(), "init.resume: '{}': read in part, but its manifest "
                 "records only the whole file's CRC-32", path);
    return true;
  }
  const uint64_t bb = f["block_bytes"].get<uint64_t>();
  CONFIG_CHECK(got.blocks.empty() || got.block_bytes == bb, "init.resume: '{}': blocks of {} bytes read, the manifest "
               "records blocks of {} (corrupt checkpoint)", path, got.block_bytes, bb);
  for (const auto& [k, crc] : got.blocks) {
    CONFIG_CHECK(k < f["block_crc32"].size(), "init.resume: '{}': block {} is past the manifest's {} blocks", path, k,
                 f["block_crc32"].size());
    check(crc, lower(f["block_crc32"][k].get<std::string>()),
          fmt::format(" in bytes [{}, {})", k * bb, std::min(bytes, (k + 1) * bb)));
  }
  return true;
}

bool left_before_first_latest(const std::string& dir, const std::string& name) {
  std::error_code ec;
  const auto complete_step = [&](const fs::path& p) {
    return is_step_name(p.filename().string()) && fs::exists(p / kManifest, ec);
  };
  if (name == ".lock" || name.rfind(".tmp-step-", 0) == 0 || name.rfind(std::string(kLatest) + ".tmp.", 0) == 0 ||
      complete_step(fs::path(dir) / name))
    return true;
  if (name != kWeights && name != std::string(kWeights) + ".tmp-link") return false;
  for (const auto& s : fs::directory_iterator(dir, ec))  // one file with a complete step's weights (place_weights)
    if (complete_step(s.path()) && fs::equivalent(fs::path(dir) / name, s.path() / kWeights, ec)) return true;
  return false;
}

bool holds_step_of(const std::string& dir, const std::string& step_dir) {
  const auto step_and_crc = [](const fs::path& step) -> std::string {  // "" where it cannot tell
    try {
      const json m = read_checkpoint_manifest(step.string());
      const json e = m.contains("files") ? m["files"].value(kWeights, json()) : json();
      return e.is_object() && e.value("crc32", json()).is_string() && m.value("step", json()).is_number_integer()
                 ? fmt::format("{} {}", m["step"].get<int64_t>(), e["crc32"].get<std::string>())
                 : "";
    } catch (const ConfigError&) {
      return "";
    }
  };
  if (step_dir.empty()) return false;
  const std::string mine = step_and_crc(step_dir);
  std::error_code ec;
  if (!mine.empty())
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (is_step_name(e.path().filename().string()) && step_and_crc(e.path()) == mine) return true;
  return false;
}

void check_resume(const RunConfig& c, std::vector<std::string>* warnings, int world_size) {
  if (!c.init.resume) return;  // (init.weights beside it, another job or phase: validate_config's rules)
  const std::string step_dir = resume_step_dir(c);
  const json m = read_checkpoint_manifest(step_dir);
  if (m.contains("files")) {  // what can be checked before reading: each file a resume reads is listed, at its size
    std::vector<std::string> files = {kWeights};
    for (const json& shard : m["optimizer"]["shards"])
      if (shard.is_object() && shard.value("file", json()).is_string()) files.push_back(shard["file"]);
    for (const std::string& f : files) {
      std::error_code ec;
      const uintmax_t size = fs::file_size(fs::path(step_dir) / f, ec);
      CONFIG_CHECK(!ec, "init.resume: cannot read '{}/{}': {}", step_dir, f, ec.message());
      verify_checkpoint_file(m, step_dir, f, FileDigest{uint64_t(size), "", 0, {}});
    }
  } else if (warnings) {
    warnings->push_back(fmt::format("init.resume: '{}' records no checksums (written before they were): its files "
                                    "are read unchecked", step_dir));
  }
  const json& old = m["config"];
  json now;
  to_json(now, c);
  for (const char* k : {"vocab_size", "d_model", "d_ff", "num_layers", "num_heads", "rope_theta"})
    CONFIG_CHECK(old["model"].value(k, json()) == now["model"][k],
                 "init.resume: the checkpoint '{}' has model.{} {}, the config {}", step_dir, k,
                 old["model"].value(k, json()).dump(), now["model"][k].dump());
  CONFIG_CHECK(old.value("precision", json()) == now["precision"],
               "init.resume: the checkpoint '{}' was written with precision {}, the config asks for {}", step_dir,
               old.value("precision", json()).dump(), now["precision"].dump());
  const int64_t step = m["step"].get<int64_t>();
  const int64_t total = int64_t(c.bench.warmup_steps) + c.bench.measure_steps;
  CONFIG_CHECK(step < total,
               "init.resume: the checkpoint '{}' is at step {}, but the run has {} steps in all (bench.warmup_steps "
               "+ measure_steps count from step 0): nothing is left to run", step_dir, step, total);
  if (!warnings) return;
  // Resuming an older step of the directory the run writes to, or of a copy of it: its later steps are another
  // branch of the run
  std::error_code ec;
  if (c.output.checkpoint && fs::exists(fs::path(*c.output.checkpoint) / kLatest, ec) &&
      (fs::weakly_canonical(step_dir, ec).parent_path() == fs::weakly_canonical(*c.output.checkpoint, ec) ||
       holds_step_of(*c.output.checkpoint, step_dir))) {
    int64_t latest_step = -1;  // the warning only: a damaged latest there does not stop a resume from another
    try {
      latest_step = read_checkpoint_manifest(resolve_checkpoint(*c.output.checkpoint))["step"].get<int64_t>();
    } catch (const ConfigError&) {
    }
    if (latest_step > step)
      warnings->push_back(fmt::format(
          "init.resume: '{}' is step {}, but '{}' has a later one (step {}): this run continues from step {} and its "
          "checkpoints become the directory's latest (the later steps are pruned as it writes)",
          step_dir, step, *c.output.checkpoint, latest_step, step));
  }
  // What changed, key by key, without the keys that change no number: in_backward (the same update, sooner), on
  // the cpu in_gemm (its product into a temporary, then the same update; on a GPU the fused product sums in another
  // order), what recomputation keeps (checkpointing.policy, k, blocks, keep_attention: recomputed activations are
  // bitwise the kept ones), fsdp's prefetch depth and the timeouts. data.path compares as the file it named
  // when the checkpoint was written (the manifest's path_canonical; a relative path meant the old working directory).
  // init.seed counts only where it seeds the run: bf16_pure's stochastic rounding. The world size counts (another
  // sums the gradients in another order).
  json was = json::object(), is = json::object();
  for (const char* sec : {"optimizer", "data", "parallel", "checkpointing"}) {
    was[sec] = old.value(sec, json::object());
    is[sec] = now[sec];
    if (!was[sec].is_object()) was[sec] = json::object();  // a hand-edited manifest
  }
  for (const char* k : {"device", "attention", "fp32_matmul"}) {
    was[k] = old.value(k, json());
    is[k] = now[k];
  }
  was["model"]["context_length"] = old["model"].value("context_length", json());
  is["model"]["context_length"] = now["model"]["context_length"];
  if (world_size > 0) {
    was["world_size"] = m.value("world_size", json());
    is["world_size"] = world_size;
  }
  if (c.precision == "bf16_pure" && c.optimizer.stochastic_rounding) {
    was["init"]["seed"] = old.value("init", json::object()).value("seed", json());
    is["init"]["seed"] = now["init"]["seed"];
  }
  for (json* j : {&was, &is}) {
    (*j)["optimizer"].erase("in_backward");
    if (c.device == "cpu") (*j)["optimizer"].erase("in_gemm");
    if (c.device == "cpu" || !c.optimizer.in_gemm.value_or(false)) (*j)["optimizer"].erase("in_gemm_min_elements");
    for (const char* k : {"policy", "k", "blocks", "keep_attention"}) (*j)["checkpointing"].erase(k);
    for (const char* k : {"prefetch_layers", "comm_timeout_s", "startup_timeout_s", "checkpoint_timeout_s"})
      (*j)["parallel"].erase(k);
  }
  const json written = m.value("data", json::object()).value("path_canonical", json());
  if (written.is_string() && is["data"].value("path", json()).is_string()) {  // else: the paths as given
    std::error_code ec;
    const std::string now_path = fs::weakly_canonical(is["data"]["path"].get<std::string>(), ec).string();
    if (!ec) {
      // a file of another size than the checkpoint's run read (rewritten in place, say) differs too: both named
      // with their sizes (checkpoints before path_bytes: the paths alone)
      const json bytes_then = m["data"].value("path_bytes", json());
      const uintmax_t bytes_now = fs::file_size(now_path, ec);
      const bool resized = !ec && bytes_then.is_number_unsigned() && bytes_then.get<uintmax_t>() != bytes_now;
      // (the size first: the warning clips long values)
      was["data"]["path"] = resized ? fmt::format("{} bytes at {}", bytes_then.get<uintmax_t>(),
                                                  written.get<std::string>())
                                    : written.get<std::string>();
      is["data"]["path"] = resized ? fmt::format("{} bytes at {}", bytes_now, now_path) : now_path;
    }
  }
  // A per-rank batch that is each run's default (data.batch_size / world size) only follows the world size
  if (world_size > 0 && m.value("world_size", json()).is_number_integer()) {
    const json old_batch = was["data"].value("batch_size", json());
    const json old_micro = was["data"].value("microbatch_size", json());
    const int64_t old_world = m["world_size"].get<int64_t>();
    if (old_batch.is_number_integer() && old_micro.is_number_integer() && old_world > 0 &&
        old_micro.get<int64_t>() == old_batch.get<int64_t>() / old_world &&
        c.data.microbatch_size == c.data.batch_size / world_size) {
      was["data"].erase("microbatch_size");
      is["data"].erase("microbatch_size");
    }
  }
  // bucket_mb counts only where ddp_bucketed runs, comm only where ranks talk
  const std::string old_strategy = m.value("strategy", "");
  if (old_strategy != "ddp_bucketed" && c.parallel.strategy != "ddp_bucketed") {
    was["parallel"].erase("bucket_mb");
    is["parallel"].erase("bucket_mb");
  }
  if (m.value("world_size", 1) <= 1 && world_size <= 1) {
    was["parallel"].erase("comm");
    is["parallel"].erase("comm");
  }
  // Keys that lay the same computation out differently (the state is resharded; only the summation order changes),
  // named apart from the rest
  auto layout_key = [](const std::string& key) {
    return key == "world_size" || key == "parallel.strategy" || key == "parallel.comm" || key == "parallel.bucket_mb" ||
           key == "data.microbatch_size";
  };
  std::vector<std::string> changed, relaid;
  auto shown = [](const json& v) {
    std::string t = v.is_null() ? "unset" : v.dump();
    return t.size() > 40 ? t.substr(0, 37) + "..." : t;
  };
  for (const auto& op : json::diff(was, is)) {  // RFC 6902 paths: /section/key[/index]
    std::string key = op.value("path", "");
    std::replace(key.begin() + (key.empty() ? 0 : 1), key.end(), '/', '.');
    if (!key.empty()) key.erase(0, 1);
    const json::json_pointer ptr(op.value("path", ""));
    const json before = was.contains(ptr) ? was[ptr] : json(), after = is.contains(ptr) ? is[ptr] : json();
    const std::string item = fmt::format("{} ({} -> {})", key, shown(before), shown(after));
    std::vector<std::string>& list = layout_key(key) ? relaid : changed;
    if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
  }
  if (!relaid.empty())
    warnings->push_back(fmt::format("init.resume: the run is laid out differently from the checkpoint's ({}): the "
                                    "state is resharded where needed, and only the order of the sums changes (the "
                                    "numbers match an uninterrupted run up to rounding in the storage precision)",
                                    fmt::join(relaid, ", ")));
  if (m.contains("schedule") && m["schedule"].value("total_steps", int64_t(0)) != total &&
      c.optimizer.schedule == "cosine" && c.optimizer.cosine_steps == 0)
    changed.push_back(fmt::format("the cosine schedule's length (optimizer.cosine_steps 0 = the run's {} steps; the "
                                  "checkpoint's run had {})", total, m["schedule"].value("total_steps", int64_t(0))));
  if (!changed.empty())
    warnings->push_back(fmt::format("init.resume: the config differs from the checkpoint's in {}: the run continues "
                                    "with the new values, so it may not match an uninterrupted run",
                                    fmt::join(changed, ", ")));
}

// ---- writing ---------------------------------------------------------------------------------------------------

CheckpointWrite::CheckpointWrite(std::string dir, int64_t step, bool is_root)
    : dir_(std::move(dir)), name_(checkpoint_step_name(step)), root_(is_root) {
  tmp_ = (fs::path(dir_) / (".tmp-" + name_)).string();
  if (!is_root) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw RuntimeError(fmt::format("checkpoint: cannot create '{}': {}", dir_, ec.message()));
  fs::remove_all(tmp_, ec);  // a crashed write of the same step
  if (!fs::create_directory(tmp_, ec) || ec)
    throw RuntimeError(fmt::format("checkpoint: cannot create '{}': {}", tmp_, ec ? ec.message() : "exists"));
}

CheckpointWrite::~CheckpointWrite() {
  if (!root_ || committed_ || !files_done_) return;
  std::error_code ec;  // best effort (the failure that got here is what the run reports)
  fs::remove_all(tmp_, ec);
}

std::string CheckpointWrite::file(const std::string& name) const { return (fs::path(tmp_) / name).string(); }

namespace {

/// DIR/model.safetensors made step_dir's weights: a hard link, swapped in atomically (link to a temporary name,
/// rename), or with copy_fallback a copy where the filesystem has no hard links. Returns false when no hard link
/// could be made and copy_fallback is off; RuntimeError when neither works.
bool place_weights(const std::string& dir, const std::string& step_dir, bool copy_fallback) {
  std::error_code ec;
  const std::string link = (fs::path(dir) / kWeights).string(), link_tmp = link + ".tmp-link";
  fs::remove(link_tmp, ec);
  fs::create_hard_link(fs::path(step_dir) / kWeights, link_tmp, ec);
  if (!ec && ::rename(link_tmp.c_str(), link.c_str()) == 0) {
    fsync_dir(dir);
    return true;
  }
  fs::remove(link_tmp, ec);
  if (!copy_fallback) return false;
  fs::copy_file(fs::path(step_dir) / kWeights, link_tmp, fs::copy_options::overwrite_existing, ec);
  if (ec || ::rename(link_tmp.c_str(), link.c_str()) != 0)
    throw RuntimeError(fmt::format("checkpoint: cannot place '{}': {}", link, ec ? ec.message() : std::strerror(errno)));
  fsync_dir(dir);
  return true;
}

}  // namespace

std::string repair_checkpoint_weights(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / kLatest, ec)) return "";
  const std::string name = trim(read_text((fs::path(dir) / kLatest).string()));
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") return "";
  const fs::path step_weights = fs::path(dir) / name / kWeights, top = fs::path(dir) / kWeights;
  struct stat a {}, b {};
  if (::stat(step_weights.c_str(), &a) != 0 || ::stat(top.c_str(), &b) != 0) return "";
  if (a.st_dev == b.st_dev && a.st_ino == b.st_ino) return "";  // the usual case: one file, two names
  // another file: a link into another step (a run ended between placing it and `latest`), or a copy (a filesystem
  // without hard links, where the two names are never one file: nothing to tell, left as it is)
  if (b.st_nlink < 2) return "";
  // a link that cannot be made (another user's file under fs.protected_hardlinks, say) leaves it as it is, unsaid
  return place_weights(dir, (fs::path(dir) / name).string(), /*copy_fallback=*/false) ? (fs::path(dir) / name).string()
                                                                                        : "";
}

std::string CheckpointWrite::commit(const json& manifest, const std::string& parent) {
  write_json_atomic(file(kManifest), manifest);
  fsync_dir(tmp_);
  std::error_code ec;
  // A new name: rename(2) cannot replace a non-empty directory, and the one `latest` names must survive until
  // `latest` names the new one. The same step written again (a run restarted from scratch) gets a suffix.
  std::string name = name_;
  for (int i = 1; fs::exists(fs::path(dir_) / name, ec); ++i) name = fmt::format("{}.{}", name_, i);
  const std::string final_dir = (fs::path(dir_) / name).string();
  if (::rename(tmp_.c_str(), final_dir.c_str()) != 0)
    throw RuntimeError(fmt::format("checkpoint: cannot rename '{}' to '{}': {}", tmp_, final_dir,
                                   std::strerror(errno)));
  committed_ = true;  // the step directory is complete; what follows points `latest` at it
  fsync_dir(dir_);
  // DIR/model.safetensors first, then `latest`: a process that ends between the two leaves the weights file at this
  // complete step and `latest` at the one before, which the next run that takes DIR's lock puts right
  // (repair_checkpoint_weights). The other order left the weights file a step behind with nothing to notice it.
  place_weights(dir_, final_dir, /*copy_fallback=*/true);
  const std::string latest = (fs::path(dir_) / kLatest).string();
  const std::string previous = trim(read_text(latest));
  const std::string line = name + "\n";
  write_file_atomic(latest, {{line.data(), line.size()}});
  fsync_dir(dir_);
  // Keep the new checkpoint and the one before it on this run's line (a resume of an older step leaves the later
  // steps of the abandoned line behind: those go); remove older step directories and stale temporaries.
  const std::string keep = !parent.empty() && fs::exists(fs::path(dir_) / parent / kManifest, ec) ? parent : previous;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    // (a step-*/ without a manifest is not one of ours: left alone)
    const bool old_step = is_step_name(n) && n != name && n != keep && fs::exists(e.path() / kManifest, ec);
    const bool stale_tmp = n.rfind(".tmp-step-", 0) == 0;
    if ((old_step || stale_tmp) && e.is_directory()) fs::remove_all(e.path(), ec);
    // `latest`'s temporary files of a run killed while it replaced `latest` (this directory is locked by this run)
    if (n.rfind(std::string(kLatest) + ".tmp.", 0) == 0 && e.is_regular_file()) fs::remove(e.path(), ec);
  }
  return final_dir;
}

// ---- partial reads ---------------------------------------------------------------------------------------------

SafetensorsSlices::SafetensorsSlices(const std::string& path) : path_(path) {
  auto fail = [&](const std::string& why) { return ConfigError(fmt::format("init.resume: '{}': {}", path, why)); };
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw fail(std::strerror(errno));
  const uint64_t size = uint64_t(st.st_size);
  size_ = size;
  unsigned char len_le[8];
  if (size < 8 || ::pread(fd_, len_le, 8, 0) != 8) throw fail("truncated");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | len_le[i];
  if (hlen > 100'000'000 || hlen > size - 8) throw fail("truncated or corrupt header");
  header_end_ = 8 + hlen;
  std::string header(hlen, '\0');
  if (::pread(fd_, header.data(), hlen, 8) != ssize_t(hlen)) throw fail("cannot read the header");
  json h;
  try {
    h = json::parse(header);
  } catch (const json::exception& e) {
    throw fail(fmt::format("bad header: {}", e.what()));
  }
  for (auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    Entry e;
    try {
      e.dtype = v.at("dtype").get<std::string>();
      e.numel = 1;
      for (int64_t d : v.at("shape").get<std::vector<int64_t>>()) e.numel *= d;
      const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      e.esize = safetensors_dtype_size(e.dtype);
      if (off.size() != 2 || e.esize == 0 || off[1] - off[0] != uint64_t(e.numel) * e.esize ||
          8 + hlen + off[1] > size)
        throw fail(fmt::format("tensor '{}' runs past the end of the file or has a bad dtype (truncated?)", name));
      e.offset = 8 + hlen + off[0];
    } catch (const json::exception& ex) {
      throw fail(fmt::format("bad header entry '{}': {}", name, ex.what()));
    }
    entries_.emplace_back(name, e);
  }
}

SafetensorsSlices::~SafetensorsSlices() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsSlices::Entry& SafetensorsSlices::entry(const std::string& name) const {
  for (const auto& [n, e] : entries_)
    if (n == name) return e;
  throw ConfigError(fmt::format("init.resume: '{}' has no tensor '{}'", path_, name));
}

bool SafetensorsSlices::has(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& p) { return p.first == name; });
}
std::string SafetensorsSlices::dtype(const std::string& name) const { return entry(name).dtype; }
int64_t SafetensorsSlices::numel(const std::string& name) const { return entry(name).numel; }

FileDigest SafetensorsSlices::stream(const std::vector<Slice>& slices, const Sink& sink, uint64_t block_bytes,
                                     bool whole) const {
  const uint64_t B = std::max<uint64_t>(block_bytes, 1), n_blocks = (size_ + B - 1) / B;
  std::vector<std::pair<uint64_t, uint64_t>> range;  // each slice's file bytes [first, second)
  std::vector<bool> wanted(n_blocks, whole);
  for (const Slice& q : slices) {
    const Entry& e = entry(q.name);
    CONFIG_CHECK(q.begin >= 0 && q.count >= 0 && q.begin + q.count <= e.numel,
                 "init.resume: '{}': elements [{}, {}) of '{}' are outside its {} (manifest and file disagree)", path_,
                 q.begin, q.begin + q.count, q.name, e.numel);
    const uint64_t b = e.offset + uint64_t(q.begin) * e.esize, end = b + uint64_t(q.count) * e.esize;
    range.emplace_back(b, end);
    for (uint64_t k = b / B; b < end && k < n_blocks && k * B < end; ++k) wanted[k] = true;
  }
  // the header's blocks too, where any block is read: the slices' places came from it (a damaged header that still
  // parses would send a rank to intact blocks of the wrong tensor)
  if (!slices.empty())
    for (uint64_t k = 0; k < n_blocks && k * B < header_end_; ++k) wanted[k] = true;
  FileDigest d{size_, "", B, {}};
  std::unique_ptr<char[]> buf(new char[size_t(std::min(B, std::max<uint64_t>(size_, 1)))]);  // not zeroed
  uint32_t file_crc = 0;
  for (uint64_t k = 0; k < n_blocks; ++k) {
    if (!wanted[k]) continue;
    const uint64_t off = k * B, len = std::min(B, size_ - off);
    for (uint64_t got = 0; got < len;) {
      const ssize_t r = ::pread(fd_, buf.get() + got, size_t(len - got), off_t(off + got));
      if (r < 0 && errno == EINTR) continue;
      CONFIG_CHECK(r > 0, "init.resume: '{}': reading it failed: {}", path_,
                   r < 0 ? std::strerror(errno) : "short read (the file shrank while it was read)");
      got += uint64_t(r);
    }
    Crc32 crc;
    crc.update(buf.get(), size_t(len));
    d.blocks.emplace_back(k, crc.hex());
    if (whole) file_crc = crc32_join(file_crc, crc.value(), len);
    for (size_t i = 0; i < range.size(); ++i) {
      const uint64_t lo = std::max(range[i].first, off), hi = std::min(range[i].second, off + len);
      if (lo < hi) sink(i, lo - range[i].first, buf.get() + (lo - off), hi - lo);
    }
  }
  if (whole) d.crc32 = crc32_hex(file_crc);
  return d;
}

}  // namespace trainer
