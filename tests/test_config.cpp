// Tests of the run config: presets (against the handout's Table 1 typed in here), resolution of "auto" values,
// --set overrides, unknown keys, type errors, every validation rule, and that --help and configs/README.md list
// every key with its default. Files live in a fresh temp directory per test.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "build_info.h"
#include "config/config.h"
#include "core/errors.h"
#include "io/safetensors.h"
#include "jobs/job.h"
#include "model/model.h"

using trainer::ConfigError;
using trainer::json;
using trainer::load_config;
using trainer::RunConfig;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

namespace {

/// A temp directory removed (with its contents) at scope exit.
struct TempDir {
  fs::path root;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trainer_test_config_XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    root = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string path(const std::string& name) const { return (root / name).string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
    return path(name);
  }
  std::string write_tokens(const std::string& name, const std::vector<uint16_t>& ids) const {
    std::ofstream f(path(name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(ids.data()), std::streamsize(ids.size() * sizeof(uint16_t)));
    return path(name);
  }
  /// Zero weights of model `m` (every parameter as F32 under its reference name), with `change` applied to the
  /// tensor list first (to break the file on purpose).
  std::string write_weights(const std::string& name, const trainer::ModelCfg& m,
                            const std::function<void(std::vector<trainer::NamedTensor>&)>& change = {}) const {
    const trainer::ParamLayout layout(trainer::model_dims(m));
    std::vector<float> zeros(size_t(layout.total()), 0.0f);
    std::vector<trainer::NamedTensor> ts;
    for (const trainer::ParamInfo& p : layout.params())
      ts.push_back({p.name, trainer::DType::f32, p.shape, zeros.data()});
    if (change) change(ts);
    trainer::write_safetensors(path(name), ts);
    return path(name);
  }
};

/// The tiny model with every output under `dir`, as a config document.
json tiny_doc(const TempDir& dir) {
  return json{{"model", {{"preset", "tiny"}}},
              {"data", {{"source", "random"}, {"batch_size", 4}}},
              {"output", {{"results", dir.path("result.json")}}}};
}

/// Writes `doc` to dir/run.json and loads it.
RunConfig load_doc(const TempDir& dir, const json& doc, const std::vector<std::string>& sets = {}, int world = 1,
                   bool cuda = false) {
  return load_config(dir.write("run.json", doc.dump()), sets, world, cuda);
}

/// Every leaf of a config JSON as (dotted key, value); arrays are leaves.
void flatten(const json& j, const std::string& prefix, std::vector<std::pair<std::string, json>>& out) {
  for (const auto& [k, v] : j.items()) {
    if (v.is_object())
      flatten(v, prefix + k + ".", out);
    else
      out.emplace_back(prefix + k, v);
  }
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Dims {
  const char* name;
  int vocab, ctx, d_model, d_ff, layers, heads;
};
// CS336 assignment 2 handout, Table 1 (vocab 10000, context 512), plus tiny and leaderboard_8b from DESIGN.md.
const Dims kTable1[] = {
    {"tiny", 256, 64, 64, 172, 2, 4},
    {"small", 10000, 512, 768, 3072, 12, 12},
    {"medium", 10000, 512, 1024, 4096, 24, 16},
    {"large", 10000, 512, 1280, 5120, 36, 20},
    {"xl", 10000, 512, 2560, 10240, 32, 32},
    {"10B", 10000, 512, 4608, 12288, 50, 36},
    {"leaderboard_8b", 151936, 32768, 4096, 11008, 34, 32},
};

void check_dims(const trainer::ModelCfg& m, const Dims& d) {
  INFO("preset " << d.name);
  CHECK(m.vocab_size == d.vocab);
  CHECK(m.context_length == d.ctx);
  CHECK(m.d_model == d.d_model);
  CHECK(m.d_ff == d.d_ff);
  CHECK(m.num_layers == d.layers);
  CHECK(m.num_heads == d.heads);
}

}  // namespace

TEST_CASE("config: presets match Table 1", "[config]") {
  std::vector<std::string> names;
  for (const auto& d : kTable1) {
    names.push_back(d.name);
    const auto m = trainer::preset_model(d.name);
    CHECK(m.preset == d.name);
    check_dims(m, d);
  }
  CHECK(trainer::preset_names() == names);
  REQUIRE_THROWS_WITH(trainer::preset_model("xxl"),
                      Contains("'model.preset' must be one of tiny, small") && Contains("got 'xxl'"));
}

TEST_CASE("config: every preset config file resolves", "[config]") {
  TempDir dir;
  for (const auto& d : kTable1) {
    const std::string path = std::string(trainer::build::kSourceDir) + "/configs/" + d.name + ".json";
    INFO(path);
    const RunConfig c = load_config(path, {"output.results=" + dir.path("r.json")}, 1, /*cuda_available=*/true);
    check_dims(c.model, d);
    CHECK(c.job == "train");
    CHECK(c.name == d.name);
    CHECK(c.device == "cuda");
    CHECK(c.parallel.comm == "nccl");
    CHECK(c.data.source == "random");
    CHECK(c.data.microbatch_size == c.data.batch_size);
    CHECK(c.bench.warmup_steps == 5);
    CHECK(c.bench.measure_steps == 10);
    if (std::string(d.name) == "leaderboard_8b") {
      CHECK(c.precision == "bf16");
      CHECK(c.attention == "flash2");
      CHECK(c.data.batch_size == 2);
    } else {
      CHECK(c.precision == "fp32");
      CHECK(c.attention == "naive");
      CHECK(c.data.batch_size == 4);
    }
  }
}

TEST_CASE("config: configs/xl_fsdp.json resolves to the handout's FSDP run on 2 ranks", "[config]") {
  TempDir dir;
  const std::string path = std::string(trainer::build::kSourceDir) + "/configs/xl_fsdp.json";
  const RunConfig c = load_config(path, {"output.results=" + dir.path("r.json")}, 2, /*cuda_available=*/true);
  check_dims(c.model, kTable1[4]);
  CHECK(std::string(kTable1[4].name) == "xl");
  CHECK(c.precision == "bf16");
  CHECK(c.attention == "flash2");
  CHECK(c.parallel.strategy == "fsdp");
  CHECK(c.parallel.prefetch_layers == 2);
  CHECK(c.data.batch_size == 8);
  CHECK(c.data.microbatch_size == 4);  // the handout's batch 4 on each of 2 ranks
  CHECK(c.parallel.comm == "nccl");
  // The card's `mpirun -np 2 trainer configs/xl_fsdp.json` on a one-GPU host: comm auto falls back to mpi, warned.
  std::vector<std::string> warnings;
  const RunConfig shared =
      load_config(path, {"output.results=" + dir.path("r.json")}, 2, true, trainer::HostInfo{2, 1}, &warnings);
  CHECK(shared.parallel.comm == "mpi");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("auto resolves to mpi"));
}

TEST_CASE("config: embedded default is configs/default.json and resolves", "[config]") {
  const std::string src = std::string(trainer::build::kSourceDir) + "/configs/default.json";
  CHECK(json::parse(trainer::build::kDefaultConfig) == json::parse(read_text(src)));

  TempDir dir;
  std::vector<uint16_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint16_t((i * 37) % 256);
  const std::string tokens = dir.write_tokens("fortunes.u16", ids);
  const RunConfig c = load_config("", {"data.path=" + tokens, "output.results=" + dir.path("r.json")}, 1, false);
  // Structure only: the training hyper-parameters of the default are tuned in configs/default.json.
  CHECK(c.name == "default");
  CHECK(c.device == "cpu");  // no CUDA here
  CHECK(c.precision == "fp32");
  CHECK(c.attention == "naive");
  CHECK(c.parallel.comm == "mpi");
  CHECK(c.model.preset.empty());
  CHECK(c.model.vocab_size == 256);  // byte-level tokens
  CHECK(c.model.context_length > 0);
  CHECK(c.data.source == "tokens");
  CHECK(c.data.path == tokens);
  CHECK(c.bench.measure_steps + c.bench.warmup_steps >= 1);

  // Without the override the default points at build/data/fortunes.u16 (relative to the working directory).
  const RunConfig raw = [] {
    RunConfig r;
    from_json(json::parse(trainer::build::kDefaultConfig), r);
    return r;
  }();
  CHECK(raw.data.path == std::string("build/data/fortunes.u16"));
  CHECK(raw.output.results == std::string("results/runs/default.json"));
}

TEST_CASE("config: resolution of auto values, name and microbatch", "[config]") {
  TempDir dir;
  const json doc = tiny_doc(dir);
  SECTION("cpu") {
    const RunConfig c = load_doc(dir, doc, {}, 1, false);
    CHECK(c.device == "cpu");
    CHECK(c.attention == "naive");
    CHECK(c.parallel.comm == "mpi");
    CHECK(c.name == "run");  // stem of run.json
    CHECK(c.data.microbatch_size == 4);
  }
  SECTION("cuda fp32") {
    const RunConfig c = load_doc(dir, doc, {}, 1, true);
    CHECK(c.device == "cuda");
    CHECK(c.attention == "naive");
    CHECK(c.parallel.comm == "nccl");
  }
  SECTION("cuda bf16") {
    const RunConfig c = load_doc(dir, doc, {"precision=bf16"}, 1, true);
    CHECK(c.attention == "flash2");
  }
  SECTION("explicit values are kept") {
    const RunConfig c = load_doc(dir, doc, {"device=cpu", "attention=naive", "parallel.comm=mpi", "name=abc"}, 1, true);
    CHECK(c.device == "cpu");
    CHECK(c.parallel.comm == "mpi");
    CHECK(c.name == "abc");
  }
  SECTION("gemm_autotune null (auto): on unless deterministic; an explicit true with deterministic is refused") {
    CHECK(load_doc(dir, doc).gemm_autotune == true);
    CHECK(load_doc(dir, doc, {"deterministic=true"}).gemm_autotune == false);
    CHECK(load_doc(dir, doc, {"deterministic=true", "gemm_autotune=false"}).gemm_autotune == false);
    CHECK(load_doc(dir, doc, {"gemm_autotune=false"}).gemm_autotune == false);  // explicit: kept
    CHECK_THROWS_WITH(load_doc(dir, doc, {"deterministic=true", "gemm_autotune=true"}),
                      Catch::Contains("with deterministic true leave gemm_autotune null (auto: off) or false"));
    // the record's section says why it is off: the cpu first (it has no algorithms either way)
    auto why_not = [&](std::vector<std::string> sets, bool cuda) {
      const nlohmann::json j = trainer::gemm_autotune_record(load_doc(dir, doc, sets, 1, cuda), nullptr);
      return j["enabled"].get<bool>() ? std::string("enabled") : j["why_not"].get<std::string>();
    };
    CHECK_THAT(why_not({"deterministic=true"}, false), Contains("the cpu backend"));
    CHECK_THAT(why_not({"deterministic=true", "device=cuda"}, true), Contains("deterministic is true"));
    CHECK_THAT(why_not({"gemm_autotune=false", "device=cuda"}, true), Contains("gemm_autotune is false"));
    CHECK(why_not({"device=cuda"}, true) == "enabled");
  }
  SECTION("optimizer.in_backward null (auto): on wherever it can run") {
    CHECK(load_doc(dir, doc).optimizer.in_backward == true);  // strategy none, no clipping, train_step
    CHECK(load_doc(dir, doc, {"optimizer.max_grad_norm=1.0"}).optimizer.in_backward == false);
    CHECK(load_doc(dir, doc, {"parallel.strategy=ddp_flat"}, 2).optimizer.in_backward == false);
    CHECK(load_doc(dir, doc, {"parallel.strategy=zero1"}, 2).optimizer.in_backward == false);
    // fsdp: each unit's shards once its reduce_scatter lands; in_gemm (the whole weight in one product) stays off
    const RunConfig fsdp = load_doc(dir, doc, {"parallel.strategy=fsdp", "device=cuda", "precision=bf16"}, 2);
    CHECK((fsdp.optimizer.in_backward == true && fsdp.optimizer.in_gemm == false));
    CHECK(load_doc(dir, doc, {"device=cuda", "precision=bf16"}).optimizer.in_gemm == true);  // strategy none
    CHECK_THROWS_WITH(load_doc(dir, doc, {"optimizer.in_backward=true", "parallel.strategy=zero1"}, 2),
                      Catch::Contains("in_backward is implemented for parallel.strategy 'none' and 'fsdp', got "
                                      "'zero1'"));
    CHECK(load_doc(dir, doc, {"bench.phase=forward_backward"}).optimizer.in_backward == false);
    CHECK(load_doc(dir, doc, {"optimizer.in_backward=false"}).optimizer.in_backward == false);  // explicit: kept
    // explicit true where no update runs: refused (it had been kept and the record said true while nothing moved)
    CHECK_THROWS_WITH(load_doc(dir, doc, {"optimizer.in_backward=true", "bench.phase=forward"}),
                      Catch::Contains("bench.phase 'forward' runs no update"));
  }
  SECTION("microbatch defaults to the per-rank batch") {
    const std::string ddp = "parallel.strategy=ddp_flat";
    CHECK(load_doc(dir, doc, {"data.batch_size=8", ddp}, 2).data.microbatch_size == 4);
    CHECK(load_doc(dir, doc, {"data.batch_size=8", ddp}, 4).data.microbatch_size == 2);
    CHECK(load_doc(dir, doc, {"data.batch_size=8", "data.microbatch_size=2", ddp}, 2).data.microbatch_size == 2);
  }
  SECTION("a checkpoint directory loses its trailing slashes (log lines and the record name ck/step-N)") {
    CHECK(load_doc(dir, doc, {"output.checkpoint=" + dir.path("ck") + "//"}).output.checkpoint == dir.path("ck"));
  }
  SECTION("the schedule's keys under schedule constant, cosine's implied cycle, keep_attention without recompute") {
    auto warnings_of = [&](const std::vector<std::string>& sets) {
      std::vector<std::string> w;
      load_config(dir.write("run.json", doc.dump()), sets, 1, false, trainer::HostInfo{}, &w);
      return w;
    };
    CHECK(warnings_of({}).empty());
    const auto w = warnings_of({"optimizer.warmup_steps=20", "optimizer.min_lr=1e-5"});
    REQUIRE(w.size() == 2);
    CHECK_THAT(w[0], Contains("optimizer.warmup_steps has no effect: schedule 'constant' keeps lr"));
    CHECK_THAT(w[1], Contains("optimizer.min_lr has no effect"));
    CHECK(warnings_of({"optimizer.schedule=cosine", "optimizer.warmup_steps=20", "optimizer.cosine_steps=100"})
              .empty());
    // a warm-up as long as the run is fine (the explicit rule allows warmup_steps == cosine_steps too); a longer one
    // with cosine_steps 0 never reaches lr: a warning, not a refusal (a short trial of a long schedule)
    CHECK(warnings_of({"optimizer.schedule=cosine", "optimizer.warmup_steps=15"}).empty());
    const auto longer = warnings_of({"optimizer.schedule=cosine", "optimizer.warmup_steps=20", "bench.warmup_steps=2",
                                     "bench.measure_steps=6"});
    REQUIRE(longer.size() == 1);
    CHECK_THAT(longer[0], Contains("optimizer.warmup_steps 20 exceeds the run's 8 steps"));
    // keep_attention where no block is recomputed; with listed blocks (recomputed on their own) it applies
    for (const char* policy : {"none", "selective"}) {
      const auto ka = warnings_of({std::string("checkpointing.policy=") + policy, "checkpointing.keep_attention=true"});
      REQUIRE(ka.size() == 1);
      CHECK_THAT(ka[0], Contains("checkpointing.keep_attention has no effect: policy '" + std::string(policy) +
                                 "' recomputes no block unless checkpointing.blocks lists some"));
      CHECK(warnings_of({std::string("checkpointing.policy=") + policy, "checkpointing.keep_attention=true",
                         "checkpointing.blocks=[0]"}).empty());
    }
    CHECK(warnings_of({"checkpointing.policy=full", "checkpointing.keep_attention=true"}).empty());
  }
  SECTION("the benchmark jobs need no model (they build none); an unknown preset is still refused") {
    const json bench = {{"output", {{"results", dir.path("result.json")}}}, {"model", {{"preset", ""}}}};
    for (const char* job : {"collective_bench", "attention_bench"}) {
      INFO(job);
      json d = bench;
      d["job"] = job;
      CHECK(load_doc(dir, d).model.vocab_size == 0);
      CHECK_THROWS_WITH(load_doc(dir, d, {"model.preset=huge"}), Contains("'model.preset' must be one of"));
    }
    json d = bench;
    d["job"] = "train";
    CHECK_THROWS_WITH(load_doc(dir, d), Contains("'model.vocab_size' must be > 0, got 0 (set it, or choose a"));
  }
  SECTION("a preset fills only the dims left at 0") {
    const RunConfig c = load_doc(dir, doc, {"model.preset=small", "model.context_length=1024", "model.num_layers=2"});
    CHECK(c.model.context_length == 1024);
    CHECK(c.model.num_layers == 2);
    CHECK(c.model.d_model == 768);
    CHECK(c.model.d_ff == 3072);
    CHECK(c.model.num_heads == 12);
    CHECK(c.model.vocab_size == 10000);
  }
  SECTION("--set model.preset takes every dim from the preset but those also given with --set") {
    json d = doc;  // explicit dims in the file, as in the embedded default
    d["model"] = {{"preset", ""}, {"vocab_size", 50}, {"context_length", 8}, {"d_model", 24}, {"d_ff", 40},
                  {"num_layers", 1}, {"num_heads", 3}};
    const RunConfig c = load_doc(dir, d, {"model.num_layers=2", "model.preset=small"});
    CHECK(c.model.d_model == 768);
    CHECK(c.model.d_ff == 3072);
    CHECK(c.model.num_heads == 12);
    CHECK(c.model.vocab_size == 10000);
    CHECK(c.model.context_length == 512);
    CHECK(c.model.num_layers == 2);  // given with --set (before the preset, too)
    CHECK(load_doc(dir, d, {"model.preset=\"\""}).model.d_model == 24);  // no preset: the file's dims
    d["model"]["preset"] = "small";  // a preset in the file fills only the dims it leaves at 0
    CHECK(load_doc(dir, d).model.d_model == 24);
    const RunConfig e = load_config("", {"model.preset=xl", "data.source=random"}, 1, false);  // the default's
    CHECK((e.model.d_model == 2560 && e.model.num_layers == 32 && e.model.vocab_size == 10000));
    // the last preset given wins, in either form: cleared again, the file's dims
    CHECK(load_doc(dir, d, {"model.preset=xl", "model.preset="}).model.d_model == 24);
    CHECK(load_doc(dir, d, {"model={\"preset\": \"small\"}"}).model.d_model == 768);
    const RunConfig f = load_doc(dir, d, {"model={\"preset\": \"small\", \"d_model\": 384}", "model.num_heads=6"});
    CHECK((f.model.d_model == 384 && f.model.num_heads == 6 && f.model.d_ff == 3072));
  }
  SECTION("explicit dims without a preset") {
    json d = doc;
    d["model"] = {{"preset", ""}, {"vocab_size", 50}, {"context_length", 8}, {"d_model", 24}, {"d_ff", 40},
                  {"num_layers", 1}, {"num_heads", 3}};
    const RunConfig c = load_doc(dir, d);
    CHECK(c.model.vocab_size == 50);
    CHECK(c.model.d_model == 24);
    CHECK(c.model.num_heads == 3);
  }
}

TEST_CASE("config: parallel.comm with more ranks than GPUs on a host", "[config]") {
  using trainer::HostInfo;
  using trainer::resolve_comm;
  // auto: nccl only on cuda with a GPU per rank of the host; ranks sharing a GPU fall back to mpi with one warning.
  CHECK(resolve_comm("auto", "cuda", HostInfo{2, 2}).comm == "nccl");
  CHECK(resolve_comm("auto", "cuda", HostInfo{1, 8}).comm == "nccl");
  CHECK(resolve_comm("auto", "cuda", HostInfo{2, 2}).warning.empty());
  CHECK(resolve_comm("auto", "cpu", HostInfo{4, 1}).comm == "mpi");
  CHECK(resolve_comm("auto", "cpu", HostInfo{4, 1}).warning.empty());
  const trainer::CommChoice shared = resolve_comm("auto", "cuda", HostInfo{3, 2});
  CHECK(shared.comm == "mpi");
  CHECK_THAT(shared.warning, Contains("auto resolves to mpi") && Contains("3 ranks share 2 GPU(s)"));
  CHECK(shared.warning.find('\n') == std::string::npos);  // one line
  // GPU count unknown (0): no fallback (a cuda run without a GPU is refused elsewhere).
  CHECK(resolve_comm("auto", "cuda", HostInfo{2, 0}).comm == "nccl");
  // Explicit nccl with ranks sharing a GPU stops at once, naming the fix; mpi and a GPU per rank are kept.
  CHECK_THROWS_WITH(resolve_comm("nccl", "cuda", HostInfo{2, 1}),
                    Contains("2 ranks share 1 GPU(s) on this host") && Contains("use parallel.comm=mpi"));
  CHECK(resolve_comm("nccl", "cuda", HostInfo{2, 2}).comm == "nccl");
  CHECK(resolve_comm("mpi", "cuda", HostInfo{4, 1}).comm == "mpi");
  CHECK(resolve_comm("mpi", "cuda", HostInfo{4, 1}).warning.empty());

  // Through load_config: the resolved config says mpi and the warning comes back to the caller.
  TempDir dir;
  const std::string path = dir.write("run.json", tiny_doc(dir).dump());
  const std::vector<std::string> ddp = {"parallel.strategy=ddp_flat", "device=cuda"};
  std::vector<std::string> warnings;
  const RunConfig c = load_config(path, ddp, 2, true, HostInfo{2, 1}, &warnings);
  CHECK(c.parallel.comm == "mpi");
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("2 ranks share 1 GPU(s)"));
  warnings.clear();
  CHECK(load_config(path, ddp, 2, true, HostInfo{2, 2}, &warnings).parallel.comm == "nccl");
  CHECK(warnings.empty());
  std::vector<std::string> nccl = ddp;
  nccl.push_back("parallel.comm=nccl");
  CHECK_THROWS_AS(load_config(path, nccl, 2, true, HostInfo{2, 1}), ConfigError);
}

TEST_CASE("config: --set overrides", "[config]") {
  TempDir dir;
  json doc = tiny_doc(dir);
  doc["optimizer"] = {{"max_grad_norm", 1.0}};
  SECTION("scalars and nested keys") {
    const RunConfig c = load_doc(dir, doc, {"optimizer.lr=3e-4", "data.seed=7", "profile.nvtx=true"});
    CHECK(c.optimizer.lr == 3e-4);
    CHECK(c.data.seed == 7);
    CHECK(c.profile.nvtx);
  }
  SECTION("values that are not JSON are strings; string keys take numbers as text") {
    const RunConfig c = load_doc(dir, doc, {"name=123", "model.preset=small", "data.dtype=uint32"});
    CHECK(c.name == "123");
    CHECK(c.model.d_model == 768);
    CHECK(c.data.dtype == "uint32");
    CHECK(load_doc(dir, doc, {"name=my run=2"}).name == "my run=2");  // split at the first '='
    CHECK(load_doc(dir, doc, {"name=\"quoted\""}).name == "quoted");
  }
  SECTION("arrays: whole and by index") {
    CHECK(load_doc(dir, doc, {"optimizer.betas=[0.8,0.95]"}).optimizer.betas == std::vector<double>{0.8, 0.95});
    CHECK(load_doc(dir, doc, {"optimizer.betas.1=0.9"}).optimizer.betas == std::vector<double>{0.9, 0.9});
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.betas.2=0.9"}),
                        Contains("'optimizer.betas' has no element 2 (it has 2)"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.betas.x=0.9"}), Contains("'optimizer.betas' has no element x"));
  }
  SECTION("a path below a null, number or string value; a section replaced by another type") {
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"checkpointing.blocks.0=1"}),
                        Contains("'checkpointing.blocks' is null, so 'checkpointing.blocks.0' has nothing to set: give "
                                 "the whole value (--set checkpointing.blocks=...)"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"model.d_model.x=1"}), Contains("'model.d_model' is 0, so"));
    // the --set preset rule reads the model section: a number or null there is the section's type error
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"model=3"}), Contains("'model' must be an object, got number 3"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"model=null"}), Contains("'model' must be an object, got null"));
  }
  SECTION("null clears an optional") {
    CHECK(load_doc(dir, doc).optimizer.max_grad_norm == 1.0);
    CHECK(!load_doc(dir, doc, {"optimizer.max_grad_norm=null"}).optimizer.max_grad_norm);
    CHECK(load_doc(dir, doc, {"output.checkpoint=" + dir.path("ck")}).output.checkpoint == dir.path("ck"));
  }
  SECTION("an object merges into a section; later overrides win") {
    const RunConfig c = load_doc(dir, doc, {R"(model={"num_layers":3})", "data.batch_size=8", "data.batch_size=2"});
    CHECK(c.model.preset == "tiny");
    CHECK(c.model.num_layers == 3);
    CHECK(c.model.d_model == 64);
    CHECK(c.data.batch_size == 2);
  }
  SECTION("errors name the key") {
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.lrr=1"}),
                        Equals("config: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?) "
                               "(in --set optimizer.lrr=1)"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"device.kind=1"}),
                        Equals("config: 'device' is \"auto\", so 'device.kind' has nothing to set: give the whole "
                               "value (--set device=...) (in --set device.kind=1)"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"nope=1"}), Contains("unknown key 'nope'"));
    // A known key in the wrong section: the hint names where it lives.
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"model.gemm_autotune=false"}),
                        Contains("unknown key 'model.gemm_autotune' (did you mean 'gemm_autotune'?)"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"gemm_autotune=maybe"}), Contains("got string \"maybe\""));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {R"(model={"layers":3})"}), Contains("unknown key 'model.layers'"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"data.batch_size=abc"}),
                        Equals("config: 'data.batch_size' must be an integer, got string \"abc\""));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"precision"}),
                        Equals("config: --set 'precision' is not of the form key.path=value"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"=3"}), Contains("is not of the form key.path=value"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer..lr=3"}), Contains("empty name in key 'optimizer..lr'"));
  }
}

TEST_CASE("config: unknown keys are rejected at every level", "[config]") {
  TempDir dir;
  json doc = tiny_doc(dir);
  SECTION("top level, with a hint") {
    doc["devicee"] = "cpu";
    REQUIRE_THROWS_WITH(load_doc(dir, doc), Equals("config: unknown key 'devicee' (did you mean 'device'?)"));
  }
  SECTION("nested") {
    doc["optimizer"] = {{"lrr", 1e-3}};
    REQUIRE_THROWS_WITH(load_doc(dir, doc),
                        Equals("config: unknown key 'optimizer.lrr' (did you mean 'optimizer.lr'?)"));
  }
  SECTION("no hint for a far-off name") {
    doc["data"]["zzzzzz"] = 1;
    REQUIRE_THROWS_WITH(load_doc(dir, doc), Equals("config: unknown key 'data.zzzzzz'"));
  }
  SECTION("sub-struct from_json names keys within its section") {
    trainer::DataCfg d;
    REQUIRE_THROWS_WITH(from_json(json{{"batchsize", 1}}, d), Contains("unknown key 'data.batchsize'"));
  }
}

TEST_CASE("config: type errors name the key and the expected type", "[config]") {
  TempDir dir;
  struct Case {
    const char* section;
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"data", "batch_size", "4", "config: 'data.batch_size' must be an integer, got string \"4\""},
      {"data", "batch_size", 2.5, "config: 'data.batch_size' must be an integer, got number 2.5"},
      {"data", "batch_size", 1e10,
       "config: 'data.batch_size' must be an integer (32-bit), got number 10000000000.0"},
      {"data", "batch_size", 4294967296LL,
       "config: 'data.batch_size' must be an integer (32-bit), got number 4294967296"},
      {"data", "seed", -1, "config: 'data.seed' must be a non-negative integer, got number -1"},
      {"data", "path", 3, "config: 'data.path' must be a string or null, got number 3"},
      {"optimizer", "lr", "fast", "config: 'optimizer.lr' must be a number, got string \"fast\""},
      {"optimizer", "betas", 0.9, "config: 'optimizer.betas' must be an array of numbers, got number 0.9"},
      {"optimizer", "betas", json::array({0.9, "x"}),
       "config: 'optimizer.betas[1]' must be a number, got string \"x\""},
      {"optimizer", "max_grad_norm", "1",
       "config: 'optimizer.max_grad_norm' must be a number or null, got string \"1\""},
      {"profile", "nvtx", 1, "config: 'profile.nvtx' must be a boolean (true or false), got number 1"},
      {"model", "preset", nullptr, "config: 'model.preset' must be a string, got null"},
  };
  for (const auto& t : cases) {
    json doc = tiny_doc(dir);
    doc[t.section][t.key] = t.value;
    INFO(doc.dump());
    REQUIRE_THROWS_WITH(load_doc(dir, doc), Equals(t.message));
  }
  json doc = tiny_doc(dir);
  doc["model"] = "xl";
  REQUIRE_THROWS_WITH(load_doc(dir, doc), Equals("config: 'model' must be an object, got string \"xl\""));
  doc = tiny_doc(dir);
  doc["data"]["batch_size"] = 8.0;  // an integral float is an integer
  CHECK(load_doc(dir, doc).data.batch_size == 8);
  REQUIRE_THROWS_WITH(load_config(dir.write("arr.json", "[1, 2]"), {}, 1, false),
                      Equals("config: the config must be a JSON object, got array"));
}

TEST_CASE("config: reading the file", "[config]") {
  TempDir dir;
  const std::string missing = dir.path("nope.json");
  REQUIRE_THROWS_WITH(load_config(missing, {}, 1, false),
                      Equals("config: cannot read '" + missing + "': No such file or directory"));
  REQUIRE_THROWS_WITH(load_config(dir.root.string(), {}, 1, false), Contains("Is a directory"));
  const std::string bad = dir.write("bad.json", "{\n  \"job\": \"train\",\n  \"model\": {preset: 1}\n}\n");
  REQUIRE_THROWS_WITH(load_config(bad, {}, 1, false),
                      Contains("config: '" + bad + "' is not valid JSON: parse error at line 3, column"));
  REQUIRE_THROWS_WITH(load_config(dir.write("empty.json", ""), {}, 1, false), Contains("is not valid JSON"));
  // Comments are allowed.
  const std::string commented = dir.write(
      "c.json", "{ // the tiny model\n \"model\": {\"preset\": \"tiny\"}, /* block */ \"output\": {\"results\": \"" +
                    dir.path("r.json") + "\"}}");
  CHECK(load_config(commented, {}, 1, false).model.d_model == 64);
}

TEST_CASE("config: validation rules", "[config]") {
  TempDir dir;
  const json doc = tiny_doc(dir);
  REQUIRE_NOTHROW(load_doc(dir, doc));
  struct Case {
    std::vector<std::string> sets;
    int world;
    const char* message;  // substring
  };
  const Case cases[] = {
      {{"job=bogus"}, 1, "config: 'job' must be one of train"},
      {{"model.preset=xxl"}, 1, "'model.preset' must be one of tiny, small, medium, large, xl, 10B, leaderboard_8b"},
      {{"model.d_model=100", "model.num_heads=3"}, 1, "model: d_model 100 is not divisible by num_heads 3"},
      {{"model.d_model=12", "model.num_heads=4"}, 1, "model: d_head 3 (d_model 12 / num_heads 4) must be even"},
      {{"model.vocab_size=-1"}, 1, "config: 'model.vocab_size' must be > 0, got -1"},
      {{"model.num_layers=-2"}, 1, "config: 'model.num_layers' must be > 0, got -2"},
      {{"model.preset=", "model.d_ff=0"}, 1,
       "'model.vocab_size' must be > 0, got 0 (set it, or choose a model.preset)"},
      {{"model.rope_theta=0"}, 1, "config: 'model.rope_theta' must be > 0, got 0"},
      {{"model.rope_theta=1e-300"}, 1, "model: rope_theta 1e-300 is 0 in fp32"},
      {{"model.rope_theta=1e300"}, 1, "model: rope_theta 1e+300 is beyond fp32's range"},
      {{"optimizer.eps=1e-46"}, 1, "config: 'optimizer.eps' 1e-46 is 0 in fp32"},
      {{"optimizer.weight_decay=1e39"}, 1, "config: 'optimizer.weight_decay' 1e+39 is beyond fp32's range"},
      {{"optimizer.lr=1e32", "optimizer.betas=[0.9999999, 0.999]"}, 1,
       "config: AdamW's step size lr / (1 - beta1) = 1e+32 / 1e-07 can exceed fp32's range"},
      {{"device=gpu"}, 1, "config: 'device' must be one of auto, cpu, cuda; got 'gpu'"},
      {{"precision=fp16"}, 1, "config: 'precision' must be one of fp32, bf16, bf16_pure; got 'fp16'"},
      {{"attention=xformers"}, 1, "config: 'attention' must be one of auto, naive, flash2; got 'xformers'"},
      {{"precision=bf16"}, 1, "precision: bf16 needs device 'cuda' (the CPU backend is the fp32 reference;"},
      {{"cuda_graph=1"}, 1, "config: 'cuda_graph' must be a boolean"},
      {{"checkpointing.policy=bogus"}, 1, "config: 'checkpointing.policy' must be one of none, selective, full, every_k, sqrt, nested; got 'bogus'"},
      {{"checkpointing.k=0"}, 1, "config: 'checkpointing.k' must be >= 1, got 0"},
      {{"checkpointing.blocks=[99]"}, 1, "config: 'checkpointing.blocks' lists block 99, outside [0, "},
      {{"checkpointing.blocks=[0,0]"}, 1, "config: 'checkpointing.blocks' lists block 0 twice"},
      {{"checkpointing.blocks=\"all\""}, 1, "config: 'checkpointing.blocks' must be an array of integers or null"},
      {{"checkpointing.blocks=[0.5]"}, 1, "config: 'checkpointing.blocks[0]' must be an integer"},
      {{"checkpointing.lm_head_chunk_tokens=-1"}, 1, "config: 'checkpointing.lm_head_chunk_tokens' must be >= 0, got -1"},
      {{"parallel.strategy=bogus"}, 1, "config: 'parallel.strategy' must be one of none, ddp_naive"},
      {{"parallel.comm=gloo"}, 1, "config: 'parallel.comm' must be one of auto, nccl, mpi; got 'gloo'"},
      {{"parallel.comm=nccl"}, 1, "parallel: comm 'nccl' needs device 'cuda'"},
      {{"parallel.bucket_mb=0"}, 1, "config: 'parallel.bucket_mb' must be > 0, got 0"},
      {{"parallel.reduce_dtype=fp16"}, 1, "config: 'parallel.reduce_dtype' must be one of fp32, bf16; got 'fp16'"},
      {{"parallel.reduce_dtype=bf16"}, 1, "parallel: reduce_dtype 'bf16' applies to the ddp_* strategies, got strategy"},
      {{"device=cpu", "parallel.strategy=ddp_flat", "parallel.reduce_dtype=bf16"}, 2,
       "parallel: reduce_dtype 'bf16' needs comm 'nccl' (MPI has no bf16 sum)"},
      {{"parallel.prefetch_layers=-1"}, 1, "config: 'parallel.prefetch_layers' must be >= 0, got -1"},
      {{"bench.phase=forward", "output.checkpoint=/tmp/trainer-test-unused-ck"}, 1,
       "output.checkpoint: a checkpoint is a training run's state, but bench.phase 'forward' makes no update"},
      {{"parallel.bucket_mb=1e14"}, 1, "config: 'parallel.bucket_mb' 1e+14 is above 2^36 MiB (2^56 bytes)"},
      {{"parallel.comm_timeout_s=-5"}, 1, "config: 'parallel.comm_timeout_s' must be >= 1 (seconds; a collective "
                                           "waits for the slowest rank's step, checkpoint write or read), got -5"},
      {{"parallel.comm_timeout_s=0.001"}, 1, "config: 'parallel.comm_timeout_s' must be >= 1 (seconds;"},
      {{"parallel.startup_timeout_s=0"}, 1, "config: 'parallel.startup_timeout_s' must be >= 1 (seconds;"},
      {{"parallel.checkpoint_timeout_s=0.5"}, 1, "config: 'parallel.checkpoint_timeout_s' must be >= 1 (seconds;"},
      {{"parallel.comm_timeout_s=1e8"}, 1, "config: 'parallel.comm_timeout_s' must be <= 1e7 (seconds: 116 days), "
                                          "got 100000000"},
      {{"optimizer.lr=-0.1"}, 1, "config: 'optimizer.lr' must be >= 0, got -0.1"},
      {{"optimizer.betas=[0.9,1.0]"}, 1, "config: 'optimizer.betas[1]' must be in [0, 1), got 1"},
      {{"optimizer.betas=[-0.1,0.9]"}, 1, "config: 'optimizer.betas[0]' must be in [0, 1), got -0.1"},
      {{"optimizer.betas=[0.9]"}, 1, "config: 'optimizer.betas' must have 2 entries [beta1, beta2], got 1"},
      {{"optimizer.eps=0"}, 1, "config: 'optimizer.eps' must be > 0, got 0"},
      {{"optimizer.weight_decay=-1"}, 1, "config: 'optimizer.weight_decay' must be >= 0, got -1"},
      {{"optimizer.max_grad_norm=0"}, 1, "config: 'optimizer.max_grad_norm' must be > 0, got 0"},
      {{"optimizer.schedule=linear"}, 1, "config: 'optimizer.schedule' must be one of constant, cosine; got 'linear'"},
      {{"optimizer.warmup_steps=-1"}, 1, "config: 'optimizer.warmup_steps' must be >= 0, got -1"},
      {{"optimizer.cosine_steps=-1"}, 1, "config: 'optimizer.cosine_steps' must be >= 0, got -1"},
      {{"optimizer.min_lr=-1"}, 1, "config: 'optimizer.min_lr' must be >= 0, got -1"},
      {{"optimizer.schedule=cosine", "optimizer.warmup_steps=20", "optimizer.cosine_steps=10"}, 1,
       "optimizer: warmup_steps 20 exceeds cosine_steps 10"},
      {{"data.source=file"}, 1, "config: 'data.source' must be one of random, tokens; got 'file'"},
      {{"data.dtype=int8"}, 1, "config: 'data.dtype' must be one of uint16, uint32; got 'int8'"},
      {{"data.sampling=shuffled"}, 1, "config: 'data.sampling' must be one of random, sequential; got 'shuffled'"},
      {{"data.batch_size=0"}, 1, "config: 'data.batch_size' must be > 0, got 0"},
      {{"data.batch_size=-4"}, 1, "config: 'data.batch_size' must be > 0, got -4"},
      {{"data.batch_size=6"}, 4, "data: batch_size 6 is not divisible by world_size 4 (the global batch is split "
                                 "evenly over the ranks; e.g. --set data.batch_size=8)"},
      {{"data.microbatch_size=-1"}, 1, "config: 'data.microbatch_size' must be > 0, got -1"},
      {{"data.batch_size=8", "data.microbatch_size=3"}, 2,
       "data: per-rank batch 4 (batch_size 8 / world_size 2) is not divisible by microbatch_size 3"},
      {{"data.source=tokens"}, 1, "data: source 'tokens' needs data.path"},
      {{"bench.phase=backward"}, 1, "config: 'bench.phase' must be one of forward, forward_backward, train_step"},
      {{"bench.warmup_steps=-1"}, 1, "config: 'bench.warmup_steps' must be >= 0, got -1"},
      {{"bench.measure_steps=-1"}, 1, "config: 'bench.measure_steps' must be >= 0, got -1"},
      {{"bench.warmup_steps=0", "bench.measure_steps=0"}, 1,
       "bench: warmup_steps + measure_steps must be at least one"},
      {{"bench.log_every=-1"}, 1, "config: 'bench.log_every' must be >= 0, got -1"},
  };
  for (const auto& t : cases) {
    std::string all;
    for (const auto& s : t.sets) all += s + " ";
    INFO("--set " << all << " world_size " << t.world);
    REQUIRE_THROWS_WITH(load_doc(dir, doc, t.sets, t.world), Contains(t.message));
  }
  // Boundary values that are valid.
  CHECK_NOTHROW(load_doc(dir, doc, {"optimizer.lr=0", "optimizer.betas=[0,0.999]", "bench.warmup_steps=1",
                                    "bench.measure_steps=0", "optimizer.weight_decay=0"}));
  CHECK_NOTHROW(load_doc(dir, doc, {"precision=bf16", "device=cuda"}));
  // Rank 1's memory timeline (PATH with .rank1 before the extension) must not be another output.
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"parallel.strategy=ddp_flat", "output.results=" + dir.path("c.rank1.json"),
                                          "profile.memory_timeline=" + dir.path("c.json")}, 2),
                      Contains("rank 1's memory timeline"));
  CHECK_NOTHROW(load_doc(dir, doc, {"parallel.strategy=ddp_flat", "output.results=" + dir.path("c.rank2.json"),
                                    "profile.memory_timeline=" + dir.path("c.json")}, 2));
  CHECK_NOTHROW(load_doc(dir, doc, {"checkpointing.policy=every_k", "checkpointing.blocks=[0]",
                                    "checkpointing.lm_head_chunk_tokens=0"}));
  CHECK_NOTHROW(load_doc(dir, doc, {"data.batch_size=8", "data.microbatch_size=2", "parallel.strategy=zero1"}, 2));
  CHECK_NOTHROW(load_doc(dir, doc, {"data.batch_size=6", "parallel.strategy=fsdp", "parallel.prefetch_layers=0"}, 3));
  // One process per run unless a data-parallel strategy is chosen; unimplemented outputs are refused, not ignored.
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"data.batch_size=8"}, 2), Contains("parallel.strategy: 'none' runs one"));
  CHECK_NOTHROW(load_doc(dir, doc, {"profile.trace=" + dir.path("t.json")}));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"job=collective_bench", "profile.trace=" + dir.path("t.json")}),
                      Contains("only job 'train'"));
  CHECK(load_doc(dir, doc, {"profile.memory_timeline=" + dir.path("m.json")}).profile.memory_timeline ==
        dir.path("m.json"));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"job=collective_bench", "profile.memory_timeline=" + dir.path("m.json")}),
                      Contains("profile.memory_timeline: only job 'train'"));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"bench.warmup_steps=2147483647", "bench.measure_steps=2147483647"}),
                      Contains("at most 1e9"));
  // A number beyond double's range names itself, from --set and from a file, as a config error.
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.lrr=1"}), Contains("did you mean 'optimizer.lr'?"));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"bench.measure_steps=1e10"}), Contains("an integer (32-bit)"));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.lr=1e-400"}), Contains("underflows to 0"));
  CHECK_NOTHROW(load_doc(dir, doc, {"optimizer.lr=0.0e-5", "optimizer.weight_decay=0e3"}));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"optimizer.lr=1e400"}),
                      Contains("--set optimizer.lr=1e400") && Contains("beyond the range of a double"));
  const std::string huge = dir.write("huge.json", R"({"optimizer": {"lr": 1e400}})");
  const std::string twice = dir.write("twice.json", R"({"optimizer": {"lr": 1e-3, "eps": 1e-8, "lr": 3e-4}})");
  REQUIRE_THROWS_WITH(load_config(twice, {}, 1, false), Contains("gives the key 'optimizer.lr' twice"));
  const std::string top = dir.write("top.json", R"({"job": "train", "model": {"preset": "tiny"}, "job": "train"})");
  REQUIRE_THROWS_WITH(load_config(top, {}, 1, false), Contains("gives the key 'job' twice"));
  REQUIRE_THROWS_WITH(load_config(huge, {}, 1, false), Contains("huge.json") && Contains("beyond the range"));
  // 1e-400 in a file: JSON reads it as 0.0; the loader names the file, the line and the literal. Strings, comments
  // and zeros written with an exponent are not numbers that underflow.
  const std::string tiny_lr = dir.write("tiny_lr.json", "{\"optimizer\": {\n  \"lr\": 1e-400}}");
  REQUIRE_THROWS_WITH(load_config(tiny_lr, {}, 1, false),
                      Contains("tiny_lr.json") && Contains("line 2") && Contains("1e-400 underflows to 0"));
  const std::string fine = dir.write("fine.json", R"({"name": "r1e-400", /* 1e-999 */ "model": {"preset": "tiny"}, "optimizer": {"lr": 0e-400,
    "eps": 1e-40}} // 5e-500)");
  CHECK_NOTHROW(load_config(fine, {}, 1, false));
}

TEST_CASE("config: validate_config checks a config built in code", "[config]") {
  TempDir dir;
  RunConfig c;
  c.model = trainer::preset_model("tiny");
  c.device = "cpu";
  c.attention = "naive";
  c.parallel.comm = "mpi";
  c.data.microbatch_size = 4;
  c.output.results = dir.path("r.json");
  REQUIRE_NOTHROW(trainer::validate_config(c, 1));
  REQUIRE_THROWS_WITH(trainer::validate_config(c, 3), Contains("batch_size 4 is not divisible by world_size 3"));
  c.model.num_heads = 3;
  REQUIRE_THROWS_WITH(trainer::validate_config(c, 1), Equals("model: d_model 64 is not divisible by num_heads 3"));
}

TEST_CASE("config: files named by the config are checked", "[config]") {
  TempDir dir;
  const json doc = tiny_doc(dir);  // vocab 256, context 64
  std::vector<uint16_t> ids(200);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint16_t(i % 256);
  const std::string good = dir.write_tokens("good.u16", ids);
  const std::vector<std::string> tok = {"data.source=tokens"};
  auto with = [&](std::vector<std::string> sets, const std::string& extra) {
    sets.push_back(extra);
    return sets;
  };
  REQUIRE_NOTHROW(load_doc(dir, doc, with(tok, "data.path=" + good)));

  SECTION("token file: missing, bad size, too short, id >= vocab") {
    const std::string missing = dir.path("missing.u16");
    REQUIRE_THROWS_WITH(load_doc(dir, doc, with(tok, "data.path=" + missing)), Contains(missing));
    const std::string odd = dir.write("odd.u16", std::string(201, '\0'));
    REQUIRE_THROWS_AS(load_doc(dir, doc, with(tok, "data.path=" + odd)), ConfigError);
    const std::string short_file = dir.write_tokens("short.u16", std::vector<uint16_t>(64, 1));  // needs 65
    REQUIRE_THROWS_AS(load_doc(dir, doc, with(tok, "data.path=" + short_file)), ConfigError);
    auto bad_ids = ids;
    bad_ids[150] = 300;
    const std::string bad = dir.write_tokens("bad.u16", bad_ids);
    REQUIRE_THROWS_WITH(load_doc(dir, doc, with(tok, "data.path=" + bad)), Contains("300"));
    // The same file is fine with a vocabulary that covers id 300.
    REQUIRE_NOTHROW(load_doc(dir, doc, with(with(tok, "data.path=" + bad), "model.vocab_size=301")));
  }
  SECTION("init.weights must be a readable file") {
    const std::string missing = dir.path("w.safetensors");
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + missing}),
                        Equals("config: cannot read '" + missing + "' (init.weights): No such file or directory"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + dir.root.string()}),
                        Contains("(init.weights): not a regular file"));
    // its header is checked against the model (the data at load)
    const trainer::ModelCfg tiny = trainer::preset_model("tiny");
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + good}),
                        StartsWith("init.weights: safetensors file '" + good + "': header length"));
    const std::string w = dir.write_weights("w.safetensors", tiny);
    REQUIRE_NOTHROW(load_doc(dir, doc, {"init.weights=" + w}));
    trainer::ModelCfg two = tiny;
    two.num_layers = tiny.num_layers + 1;
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + dir.write_weights("two.safetensors", two)}),
                        Contains("the model does not have") && Contains("weights of another model?"));
    const std::string dropped = dir.write_weights("dropped.safetensors", tiny, [](auto& ts) { ts.pop_back(); });
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + dropped}), Contains("has no tensor"));
    // the benchmark jobs have no model, and leave the file alone
    REQUIRE_NOTHROW(load_doc(dir, doc, {"init.weights=" + good, "job=attention_bench"}));
  }
  SECTION("outputs must be writable, and distinct") {
    const std::string plain = dir.write("plain.txt", "x");
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"output.results=" + plain + "/r.json"}), Contains("output.results"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"output.results=/proc/trainer_test/r.json"}), Contains("output.results"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"output.checkpoint=" + plain + "/ck"}), Contains("output.checkpoint"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"profile.trace=" + plain + "/t.json"}), Contains("profile.trace"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"profile.memory_timeline=" + plain + "/m.json"}),
                        Contains("profile.memory_timeline"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"output.checkpoint=" + dir.path("result.json")}),
                        Contains("output.results: '" + dir.path("result.json") +
                                 "' lies inside the checkpoint directory"));  // the checkpoints own that directory
    const std::string init = dir.write_weights("init.safetensors", trainer::preset_model("tiny"));
    REQUIRE_THROWS_WITH(load_doc(dir, doc, {"init.weights=" + init, "output.checkpoint=" + init}),
                        Contains("output.checkpoint: '" + init + "' is also the input init.weights"));
    // A missing parent directory is fine (the writer creates it); validation itself writes nothing.
    const RunConfig c = load_doc(dir, doc, {"output.results=" + dir.path("a/b/r.json")});
    CHECK(!fs::exists(dir.path("a")));
    CHECK(!fs::exists(dir.path("a/b/r.json")));
    CHECK(c.output.results == dir.path("a/b/r.json"));
  }
}

TEST_CASE("config: to_json and from_json round-trip; optionals are null", "[config]") {
  const json d = RunConfig{};
  CHECK(d["optimizer"]["max_grad_norm"].is_null());
  CHECK(d["optimizer"]["in_backward"].is_null());  // auto
  CHECK(d["gemm_autotune"].is_null());             // auto
  CHECK(d["deterministic"] == false);
  CHECK(d["data"]["path"].is_null());
  CHECK(d["output"]["results"].is_null());
  CHECK(d["init"]["weights"].is_null());
  CHECK(d["profile"]["trace"].is_null());
  CHECK(d["optimizer"]["betas"] == json::array({0.9, 0.999}));
  CHECK(d["data"]["sampling"] == "random");
  CHECK(d["model"]["rope_theta"] == 10000.0);

  RunConfig c;
  c.name = "x";
  c.model = trainer::preset_model("xl");
  c.optimizer.max_grad_norm = 0.5;
  c.optimizer.betas = {0.8, 0.95};
  c.data.path = "a/b.u16";
  c.data.seed = 18446744073709551615ull;
  c.profile.nvtx = true;
  const json j = c;
  RunConfig back;
  from_json(j, back);
  CHECK(json(back) == j);
  CHECK(back.optimizer.max_grad_norm == 0.5);
  CHECK(back.data.seed == 18446744073709551615ull);
  CHECK(back.model.d_ff == 10240);
  // from_json overlays: keys not given keep the struct's values.
  from_json(json{{"data", {{"batch_size", 9}}}}, back);
  CHECK(back.data.batch_size == 9);
  CHECK(back.data.path == std::string("a/b.u16"));
}

TEST_CASE("config: --help and configs/README.md list every key with its default", "[config]") {
  const std::string help = trainer::help_text();
  for (const char* s : {"trainer [CONFIG.json] [--set key.path=value ...]", "--print-config", "--help", "--version",
                        "--log-all-ranks"})
    CHECK_THAT(help, Contains(s));
  const std::string readme = read_text(std::string(trainer::build::kSourceDir) + "/configs/README.md");
  REQUIRE(!readme.empty());
  std::vector<std::pair<std::string, json>> leaves;
  flatten(json(RunConfig{}), "", leaves);
  CHECK(leaves.size() >= 45);
  size_t width = 0;  // the key column: as wide as the longest key
  for (const auto& leaf : leaves) width = std::max(width, leaf.first.size());
  for (const auto& [key, value] : leaves) {
    INFO(key);
    CHECK_THAT(help, Contains(fmt::format("\n  {:<{}} {:<14} ", key, width, value.dump())));  // key, default, allowed
    CHECK_THAT(readme, Contains("| `" + key + "` | `" + value.dump() + "` |"));
  }
  for (const auto& name : trainer::preset_names()) CHECK_THAT(help, Contains(name));
}

TEST_CASE("config: the 2^56-byte size bound counts a rank's share of the batch, and scores only for naive attention",
          "[config]") {
  // tiny (4 heads, 2 layers) at context 2^20: one sequence's attention scores on every layer take 4 x 2^40 x 2 x 4
  // bytes = 2^45 where they are materialized (naive attention): 4096 sequences on one rank 2^57, beyond the bound;
  // 2048 a rank (2 ranks) 2^56, the bound itself.
  TempDir dir;
  const json doc = {{"model", {{"preset", "tiny"}, {"context_length", 1 << 20}}},
                    {"data", {{"source", "random"}, {"batch_size", 4096}}},
                    {"output", {{"results", dir.path("r.json")}}}};
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"attention=naive"}),
                      Contains("attention scores on every layer would take batch_size 4096 x num_heads 4"));
  CHECK_NOTHROW(load_doc(dir, doc, {"attention=naive", "parallel.strategy=ddp_flat"}, 2));
  CHECK_NOTHROW(load_doc(dir, doc, {"attention=flash2", "device=cuda", "precision=bf16"}, 1, /*cuda=*/true));
}

TEST_CASE("config: collective.sizes_mb is bounded by the same 2^56 bytes (2^36 MiB)", "[config]") {
  // 2^36 MiB x 2^20 bytes = 2^56 bytes, the bound itself; one MiB more is beyond it, and 1e12 MiB (1.05e18 bytes)
  // had been asked of the allocator (an out-of-memory record, exit code 3) instead of refused.
  TempDir dir;
  const json doc = tiny_doc(dir);
  CHECK_NOTHROW(load_doc(dir, doc, {"job=collective_bench", "collective.sizes_mb=[1,68719476736]"}));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"job=collective_bench", "collective.sizes_mb=[1,68719476737]"}),
                      Contains("collective.sizes_mb[1] = 68719476737") && Contains("2^56") &&
                          Contains("at most 2^36 = 68719476736 MiB"));
  REQUIRE_THROWS_WITH(load_doc(dir, doc, {"job=collective_bench", "collective.sizes_mb=[1e12]"}),
                      Contains("collective.sizes_mb[0] = 1000000000000: 1.05e+18 bytes"));
}
