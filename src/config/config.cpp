// load_config: the steps of reading a run config, each in its own file (see schema.h for the key table):
// parse.cpp (text, JSON -> RunConfig, --set), resolve.cpp (presets, "auto" values), validate.cpp, help.cpp.
// See config.h for the contract and configs/README.md for every key.
#include "config/config.h"

#include <filesystem>

#include "build_info.h"
#include "config/schema.h"
#include "core/errors.h"
#include "io/checkpoint.h"

namespace trainer {

using namespace config_schema;

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides, int world_size,
                      bool cuda_available, const HostInfo& host, std::vector<std::string>* warnings,
                      FileChecks files) {
  TRAINER_CHECK(world_size >= 1, "load_config: world_size {} < 1", world_size);
  const std::string text = path.empty() ? std::string(build::kDefaultConfig) : read_text_file(path);
  const json doc = parse_config_text(text, path.empty() ? "<embedded default config>" : path);

  RunConfig c;
  from_json(doc, c);  // unknown keys and wrong types in the file
  if (!overrides.empty()) {
    json full = c;  // every key present, so an override path that does not exist is an unknown key
    for (const auto& o : overrides) apply_override(full, o);
    // A preset given with --set (the last one given, in any form) is the model: every dim the overrides do not give
    // is the preset's, whatever the file says (a preset fills only dims left at 0, so the embedded default's explicit
    // d_model 128 would otherwise stay under "xl"). Which model keys the overrides give: each override applied to a
    // copy whose model keys hold a marker.
    // (a model section an override made another type than an object: from_json below says so)
    if (full["model"].is_object()) {
      json probe = full;
      const json marker = "\x01 not given";
      for (auto& item : probe["model"].items()) item.value() = marker;
      for (const auto& o : overrides) apply_override(probe, o);
      const json& preset = full["model"]["preset"];
      if (probe["model"]["preset"] != marker && preset.is_string() && !preset.get<std::string>().empty())
        for (const PresetDim& d : kPresetDims)
          if (probe["model"][d.name] == marker) full["model"][d.name] = 0;
    }
    RunConfig overridden;
    from_json(full, overridden);  // wrong types given by an override
    c = std::move(overridden);
  }
  resolve(c, path, world_size, cuda_available, host, warnings);
  if (c.init.resume && !c.init.resume->empty()) try {  // 'latest' read once: every later read is of this step
      c.init.resume_step_dir = resolve_checkpoint(*c.init.resume);
    } catch (const ConfigError&) {  // validate_config says what is wrong with it, with the other checks' order
    }
  validate_config(c, world_size, path, files);
  namespace fs = std::filesystem;
  std::error_code ec;  // (FileChecks::present: a checkpoint that is not here is not checked, as validate_config)
  if (warnings && (files == FileChecks::all || (c.init.resume && fs::exists(*c.init.resume, ec))))
    check_resume(c, warnings, world_size);  // what the resume changes (validate_config checked the rest)
  // A resume from the directory itself or from one of its step directories continues its run (check_resume warns
  // when that step is not the directory's latest), and so does one from a copy of it (its step's weights are one of
  // the directory's steps', by their CRC-32)
  if (warnings && c.output.checkpoint && fs::exists(fs::path(*c.output.checkpoint) / "latest") &&
      !(c.init.resume && (fs::weakly_canonical(*c.init.resume) == fs::weakly_canonical(*c.output.checkpoint) ||
                          fs::weakly_canonical(*c.init.resume).parent_path() ==
                              fs::weakly_canonical(*c.output.checkpoint) ||
                          holds_step_of(*c.output.checkpoint, c.init.resume_step_dir))))
    warnings->push_back(fmt::format(
        "output.checkpoint: '{}' already holds a checkpoint of another run; this run's checkpoints replace it (older "
        "step directories are pruned). To continue that run instead, set init.resume to it",
        *c.output.checkpoint));
  return c;
}

bool bf16_precision(const std::string& precision) { return precision == "bf16" || precision == "bf16_pure"; }
bool bf16_storage(const std::string& precision) { return precision == "bf16_pure"; }

}  // namespace trainer
