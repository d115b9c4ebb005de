// Model presets: the sizes of the CS336 assignment 2 handout, Table 1 ("based on GPT-2 configs"; vocab 10000 and
// context 512 unless set), a tiny test model, and the 8B leaderboard model (DESIGN.md, "Presets").
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/config.h"
#include "config/schema.h"
#include "core/errors.h"

namespace trainer {
namespace {

struct Preset {
  const char* name;
  int vocab_size, context_length, d_model, d_ff, num_layers, num_heads;
};

// d_head = d_model / num_heads: tiny 16, small..large 64, xl 80, 10B 128, leaderboard_8b 128 (all even, for RoPE).
constexpr Preset kPresets[] = {
    {"tiny", 256, 64, 64, 172, 2, 4},  // d_ff ~ 8/3 d_model (SwiGLU), rounded up to a multiple of 4
    {"small", 10000, 512, 768, 3072, 12, 12},
    {"medium", 10000, 512, 1024, 4096, 24, 16},
    {"large", 10000, 512, 1280, 5120, 36, 20},
    {"xl", 10000, 512, 2560, 10240, 32, 32},
    {"10B", 10000, 512, 4608, 12288, 50, 36},
    {"leaderboard_8b", 151936, 32768, 4096, 11008, 34, 32},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

const config_schema::Names& config_schema::preset_name_list() {
  static const Names names = [] {
    Names n;
    for (const auto& p : kPresets) n.emplace_back(p.name);
    return n;
  }();
  return names;
}

ModelCfg preset_model(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    ModelCfg m;
    m.preset = p.name;
    m.vocab_size = p.vocab_size;
    m.context_length = p.context_length;
    m.d_model = p.d_model;
    m.d_ff = p.d_ff;
    m.num_layers = p.num_layers;
    m.num_heads = p.num_heads;
    return m;
  }
  throw ConfigError(fmt::format("config: 'model.preset' must be one of {} (or \"\" for explicit dims); got '{}'",
                                fmt::join(preset_names(), ", "), name));
}

json changed_from_preset(const ModelCfg& m) {
  json out = json::object();
  if (m.preset.empty()) return out;
  const ModelCfg p = preset_model(m.preset);
  for (const PresetDim& d : kPresetDims)
    if (p.*d.field != m.*d.field) out[d.name] = {{"preset", p.*d.field}, {"used", m.*d.field}};
  return out;
}

}  // namespace trainer
