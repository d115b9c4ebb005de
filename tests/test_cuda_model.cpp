// The whole model on the CUDA backend against the CPU reference: loss and every gradient (fp32), the loss in bf16
// mixed precision, and a short bf16 training run tracking the fp32 loss curve. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "backend/backend.h"
#include "jobs/job.h"
#include "model/model.h"
#include "test_helpers.h"

using namespace trainer;

namespace {

struct Pass {
  double loss;
  std::vector<std::vector<float>> grads;  // per parameter, in layout order
};

// One forward + backward of a fixed batch; parameters from init_random(seed) (identical on every backend).
Pass run_pass(Device dev, const ModelDims& d, DType act, AttnImpl attn, int rows, int T, uint64_t seed,
              const ActivationPolicy& policy = {}) {
  auto be = make_backend(dev, 0);
  Model m(*be, d, act, attn, ParamLayout::kAlign, true, policy);
  m.init_random(seed);
  std::vector<int32_t> in(size_t(rows) * T), tg(size_t(rows) * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t((i * 7919 + 13) % size_t(d.vocab_size));
    tg[i] = int32_t((i * 104729 + 7) % size_t(d.vocab_size));
  }
  m.zero_grads();
  m.begin_step_losses(rows * T);
  m.forward(in.data(), tg.data(), rows, T, true, 1.f / float(rows * T), 0);
  m.backward(nullptr);
  Pass p{m.step_loss_sum() / double(rows * T), {}};
  for (const ParamInfo& info : m.layout().params()) p.grads.push_back(m.download(info, true));
  return p;
}

/// Checks every parameter's gradient: max|got - ref| <= tol max|ref| per tensor; returns the worst ratio.
double check_grads(const ModelDims& d, const Pass& got, const Pass& ref, double tol = 1e-4) {
  ParamLayout L(d);
  double worst = 0;
  for (size_t k = 0; k < L.params().size(); ++k) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < ref.grads[k].size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(got.grads[k][i] - ref.grads[k][i])));
      max_ref = std::max(max_ref, double(std::fabs(ref.grads[k][i])));
    }
    INFO(L.params()[k].name << ": max|diff| " << max_diff << " max|ref| " << max_ref);
    CHECK(max_diff <= tol * max_ref);
    worst = std::max(worst, max_diff / max_ref);
  }
  return worst;
}

void compare(const ModelDims& d, int rows, int T, AttnImpl attn) {
  const Pass ref = run_pass(Device::cpu, d, DType::f32, AttnImpl::naive, rows, T, 3);
  const Pass got = run_pass(Device::cuda, d, DType::f32, attn, rows, T, 3);
  CHECK(std::fabs(got.loss - ref.loss) / ref.loss < 1e-4);
  check_grads(d, got, ref);
  const Pass bf = run_pass(Device::cuda, d, DType::bf16, attn, rows, T, 3);
  INFO("bf16 loss " << bf.loss << " fp32 reference " << ref.loss);
  CHECK(std::fabs(bf.loss - ref.loss) / ref.loss < 1e-2);
}

/// Each step's `key` (loss, grad_norm) of two result records: `steps` values each, equal (rel_tol 0) or within rel_tol
/// of ref's; names label the two runs in the failure message.
void check_per_step(const nlohmann::json& ref, const nlohmann::json& got, const char* key, size_t steps,
                    double rel_tol, const char* ref_name, const char* got_name) {
  const auto a = ref[key]["per_step"].get<std::vector<double>>();
  const auto b = got[key]["per_step"].get<std::vector<double>>();
  REQUIRE(a.size() == steps);
  REQUIRE(b.size() == steps);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(key << " step " << i + 1 << ": " << ref_name << " " << a[i] << ", " << got_name << " " << b[i]);
    if (rel_tol == 0)
      CHECK(a[i] == b[i]);
    else
      CHECK(std::fabs(a[i] - b[i]) <= rel_tol * std::fabs(a[i]));
  }
}

}  // namespace

TEST_CASE("cuda model: tiny loss and every gradient match the CPU reference", "[cuda][model]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const ModelDims tiny{256, 64, 64, 172, 2, 4, 10000.0};
  for (AttnImpl a : {AttnImpl::naive, AttnImpl::flash2}) compare(tiny, 3, 64, a);
  compare(ModelDims{97, 33, 48, 100, 2, 3, 10000.0}, 2, 33, AttnImpl::naive);  // odd sizes, d_head 16
}

TEST_CASE("cuda model: small loss and every gradient match the CPU reference", "[cuda][model]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const ModelDims small{10000, 512, 768, 3072, 12, 12, 10000.0};
  compare(small, 1, 128, AttnImpl::naive);
}

TEST_CASE("cuda model: 20 bf16 steps of small track the fp32 loss curve within 2%", "[cuda][model]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // Real text (the default job's byte tokens) so that the loss falls and the curves can part; random tokens if the
  // data file was not prepared.
  const bool text = std::filesystem::exists("build/data/fortunes.u16");
  if (!text) WARN("build/data/fortunes.u16 missing: random tokens (a flat curve)");
  auto curve = [&](const std::string& precision) {
    RunConfig c = load_config("", {"model.preset=small", "device=cuda", "precision=" + precision, "attention=naive",
                                   text ? "data.source=tokens" : "data.source=random",
                                   "data.path=build/data/fortunes.u16", "data.batch_size=4", "bench.warmup_steps=0",
                                   "bench.measure_steps=20", "bench.log_every=0", "optimizer.schedule=constant",
                                   "output.results=/tmp/trainer_test_curve.json"},
                              1, true);
    auto r = run_train(c, RunContext{});
    return r["loss"]["per_step"].get<std::vector<double>>();
  };
  const auto fp32 = curve("fp32"), bf16 = curve("bf16");
  REQUIRE(fp32.size() == 20);
  for (size_t i = 0; i < fp32.size(); ++i) {
    INFO("step " << i << ": bf16 " << bf16[i] << " fp32 " << fp32[i]);
    CHECK(std::fabs(bf16[i] - fp32[i]) / fp32[i] < 0.02);
  }
}

TEST_CASE("cuda model: small with flash2 matches naive attention (fp32 loss and every gradient)", "[cuda][model]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // Both on the GPU: the FlashAttention-2 kernels against materialised scores, through the whole model (issue 5).
  const ModelDims small{10000, 512, 768, 3072, 12, 12, 10000.0};
  const int rows = 2, T = 300;  // T not a multiple of the tiles
  const Pass naive = run_pass(Device::cuda, small, DType::f32, AttnImpl::naive, rows, T, 5);
  const Pass flash = run_pass(Device::cuda, small, DType::f32, AttnImpl::flash2, rows, T, 5);
  INFO("loss flash2 " << flash.loss << " naive " << naive.loss);
  CHECK(std::fabs(flash.loss - naive.loss) / naive.loss < 1e-4);
  const double worst = check_grads(small, flash, naive);
  WARN("small fp32 flash2 vs naive: loss rel " << std::fabs(flash.loss - naive.loss) / naive.loss
                                               << ", worst gradient max|diff|/max|ref| " << worst);
}

TEST_CASE("cuda model: checkpointing policies and the chunked head reproduce the stored run", "[cuda][model][checkpointing]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // fp32 flash2 (deterministic forward; the backward's dQ sums with atomics, so gradients agree to rounding, not
  // bitwise) and bf16: every policy recomputes the same kernels on the same inputs.
  const ModelDims d{1000, 256, 128, 344, 5, 2, 10000.0};
  for (DType act : {DType::f32, DType::bf16}) {
    ActivationPolicy none;
    none.policy = "none";
    const Pass ref = run_pass(Device::cuda, d, act, AttnImpl::flash2, 2, 256, 5, none);
    for (const char* pol : {"selective", "full", "every_k", "sqrt", "nested"}) {
      ActivationPolicy p;
      p.policy = pol;
      p.k = 2;
      const bool chunked = std::string(pol) == "full" && act == DType::f32;  // also a ragged chunked head (f32)
      p.lm_head_chunk_tokens = chunked ? 100 : 0;
      const Pass got = run_pass(Device::cuda, d, act, AttnImpl::flash2, 2, 256, 5, p);
      INFO("policy " << pol << (act == DType::bf16 ? " bf16" : " f32"));
      CHECK(std::fabs(got.loss - ref.loss) <= (chunked ? 1e-5 : 1e-6) * std::fabs(ref.loss));
      check_grads(d, got, ref, act == DType::bf16 ? 2e-2 : 1e-4);
    }
  }
}

TEST_CASE("cuda model: steps replayed from a CUDA graph equal uncaptured steps", "[cuda][model][graph]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // The same run with cuda_graph false and true: the graph (captured at step 2, replayed from step 3) must give the
  // same losses and gradient norms bit for bit where the kernels are deterministic (naive attention; flash2 with
  // deterministic true, its dQ in a fixed order), and to rounding with flash2's default backward (it sums dQ with
  // atomics, so two uncaptured runs differ too). The cosine schedule with warm-up changes lr every step and
  // bf16_pure's stochastic rounding changes its key every step: both reach the replayed kernels through AdamW's
  // device copy of the step values, so a stale capture would show here.
  struct Case {
    std::vector<std::string> set;
    double tol;  // relative; 0: bitwise
  };
  const std::vector<std::string> base = {
      "model.preset=tiny",         "device=cuda",         "data.source=random",
      "data.batch_size=4",         "bench.warmup_steps=1", "bench.measure_steps=6",
      "bench.log_every=0",         "optimizer.schedule=cosine", "optimizer.warmup_steps=3",
      "optimizer.max_grad_norm=null", "gemm_autotune=false", "deterministic=true",
      "output.results=/tmp/trainer_test_graph.json"};
  // gemm_autotune false: the tuning times candidates, so two runs may keep different algorithms (other summation
  // orders: fp32 losses then differ from step 1, which runs uncaptured in both).
  const std::vector<Case> cases = {
      {{"precision=bf16", "attention=naive"}, 0.0},
      {{"precision=bf16", "attention=naive", "optimizer.max_grad_norm=0.05"}, 0.0},  // clipped on the device
      {{"precision=bf16", "attention=naive", "bench.phase=forward_backward"}, 0.0},
      {{"precision=fp32", "fp32_matmul=3xtf32", "attention=naive"}, 0.0},  // the split workspace
      {{"precision=fp32", "attention=naive", "data.microbatch_size=2"}, 0.0},
      {{"precision=bf16_pure", "attention=naive", "optimizer.stochastic_rounding=true", "optimizer.in_backward=true"},
       0.0},
      {{"model.preset=small", "model.num_layers=2", "model.context_length=256", "precision=bf16", "attention=flash2",
        "optimizer.in_backward=true", "checkpointing.policy=full", "deterministic=false"},
       1e-4},  // d_head 64: the Hopper kernels (TMA descriptors are kernel arguments, captured by value)
      {{"model.preset=small", "model.num_layers=2", "model.context_length=256", "precision=bf16", "attention=flash2",
        "optimizer.in_backward=true", "checkpointing.policy=full"},
       0.0},  // the Hopper forward, the Hopper backward with its dQ in key-tile order
      {{"model.preset=small", "model.num_layers=2", "model.context_length=256", "precision=bf16", "attention=flash2",
        "optimizer.in_backward=true", "optimizer.in_gemm=true", "optimizer.in_gemm_min_elements=0"},
       0.0},  // the blocks' matrices updated inside their weight-gradient products (kernels/dw_adamw on sm_90)
      {{"model.preset=small", "model.num_layers=2", "model.context_length=256", "precision=bf16", "attention=flash2",
        "optimizer.in_backward=true", "optimizer.in_gemm=true", "optimizer.in_gemm_min_elements=0",
        "deterministic=false"},
       1e-4},  // ... beside the Hopper backward's atomic dQ
      {{"model.preset=small", "model.num_layers=2", "model.context_length=256", "precision=bf16", "attention=flash2",
        "optimizer.in_backward=true", "optimizer.in_gemm=true", "optimizer.in_gemm_min_elements=0",
        "data.microbatch_size=2"},
       0.0},  // ... on the second microbatch, adding the first one's gradient (g_buf: a pointer the capture keeps)
  };
  for (const Case& k : cases) {
    auto run = [&](bool graph) {
      std::vector<std::string> set = base;
      set.insert(set.end(), k.set.begin(), k.set.end());
      set.push_back(graph ? "cuda_graph=true" : "cuda_graph=false");
      return run_train(load_config("", set, 1, true), RunContext{});
    };
    const auto eager = run(false), graph = run(true);
    std::string name;
    for (const auto& x : k.set) name += x + " ";
    INFO(name);
    REQUIRE(graph["cuda_graph"]["used"].get<bool>());
    CHECK(graph["cuda_graph"]["captured_step"].get<int>() == 2);
    CHECK(graph["cuda_graph"]["nodes"].get<int>() > 20);
    CHECK_FALSE(eager["cuda_graph"]["used"].get<bool>());
    CHECK(graph["timing"]["forward"]["mean_ms"].is_null());  // a run with a graph has no phase split
    CHECK_FALSE(eager["timing"]["forward"]["mean_ms"].is_null());
    for (const char* key : {"loss", "grad_norm"}) {
      if (eager[key]["per_step"][0].is_null()) continue;  // no optimizer step (phase forward_backward): no norm
      check_per_step(eager, graph, key, 7, k.tol, "uncaptured", "graph");
    }
    // The lr moved every step (the warm-up), so the replays did not run on the captured step's values.
    if (!graph["lr"]["per_step"][1].is_null()) {
      const auto lr = graph["lr"]["per_step"].get<std::vector<double>>();
      CHECK(lr[1] != lr[2]);
    }
    CHECK(graph["memory"]["peak_bytes"].get<uint64_t>() == eager["memory"]["peak_bytes"].get<uint64_t>());
    // With max_grad_norm 0.05 every step clips (the tiny model's norms are ~1), so the factor from the device was used.
    if (name.find("max_grad_norm") != std::string::npos)
      for (double g : graph["grad_norm"]["per_step"].get<std::vector<double>>()) CHECK(g > 0.05);
  }
}

TEST_CASE("cuda model: deterministic true repeats a flash2 run bit for bit", "[cuda][model][deterministic]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // Two runs of one config with deterministic true: the same losses and gradient norms, bit for bit, at every step
  // (the flash backward's dQ in a fixed order instead of atomic adds in any order; cuBLASLt's heuristic algorithms,
  // gemm_autotune auto off).
  // d_head 64 (small: the Hopper forward) and 80 (xl's); in_gemm auto (on: the fused dW + AdamW kernel on sm_90);
  // full recompute too (the attention forward twice a step).
  struct Width {
    const char* d_model;
    const char* heads;
  };
  for (Width w : {Width{"model.d_model=768", "model.num_heads=12"}, Width{"model.d_model=640", "model.num_heads=8"}})
    for (const char* policy : {"checkpointing.policy=none", "checkpointing.policy=full"}) {
      CAPTURE(w.d_model, policy);
      const std::vector<std::string> set = {
          "model.preset=small", "model.num_layers=2", "model.context_length=256", w.d_model, w.heads, policy,
          "device=cuda", "precision=bf16", "attention=flash2", "deterministic=true", "data.source=random",
          "data.batch_size=4",
          "bench.warmup_steps=1", "bench.measure_steps=5", "bench.log_every=0", "optimizer.lr=1e-3",
          "optimizer.max_grad_norm=null", "output.results=/tmp/trainer_test_deterministic.json"};
      const auto a = run_train(load_config("", set, 1, true), RunContext{});
      const auto b = run_train(load_config("", set, 1, true), RunContext{});
      CHECK_FALSE(a["gemm_autotune"]["enabled"].get<bool>());
      CHECK_THAT(a["gemm_autotune"]["why_not"].get<std::string>(), Catch::Contains("deterministic is true"));
      for (const char* key : {"loss", "grad_norm"}) check_per_step(a, b, key, 6, 0.0, "first run", "second run");
      const auto loss = a["loss"]["per_step"].get<std::vector<double>>();
      CHECK(loss.back() != loss.front());  // the weights moved
    }
}

TEST_CASE("cuda model: optimizer.in_gemm trains as in_backward does", "[cuda][model][dw_adamw]") {
  if (!cuda_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  // The same run with the blocks' weight matrices updated inside their products (in_gemm: on sm_90 one kernel per
  // matrix, kernels/dw_adamw) and after the unit's backward (in_backward alone). The products sum in another order
  // (our wgmma tiles against cuBLASLt's), so losses and norms agree to rounding, not bitwise. Microbatches of 4 (one
  // a step) and 2 (the first one's gradient added in the second's fused product, g_buf).
  for (const char* micro : {"data.microbatch_size=4", "data.microbatch_size=2"}) {
    CAPTURE(micro);
    const std::vector<std::string> base = {
        "model.preset=small",  "model.num_layers=2",   "model.context_length=256", "device=cuda",
        "precision=bf16",      "attention=flash2",     "data.source=random",       "data.batch_size=4",
        "bench.warmup_steps=1", "bench.measure_steps=6", "bench.log_every=0",       "optimizer.in_backward=true",
        "optimizer.lr=1e-3",   "optimizer.max_grad_norm=null", "cuda_graph=false",
        "output.results=/tmp/trainer_test_in_gemm.json", micro};
    auto run = [&](bool in_gemm) {
      std::vector<std::string> set = base;
      set.push_back(in_gemm ? "optimizer.in_gemm=true" : "optimizer.in_gemm=false");
      set.push_back("optimizer.in_gemm_min_elements=0");  // every matrix (small's are below the default)
      if (in_gemm) set.push_back("profile.trace=/tmp/trainer_test_in_gemm_trace.json");  // the record's range summary
      return run_train(load_config("", set, 1, true), RunContext{});
    };
    const auto plain = run(false), fused = run(true);
    // in_gemm took effect: 4 fused products a block, 2 blocks, the head's, once a step; on an H100 / H200 the fused
    // kernel (its range), elsewhere the default's product + adamw
    const std::string backend = fused["backend"].get<std::string>();
    std::map<std::string, double> calls;
    for (const auto& r : fused["profile"]["ranges"]) calls[r["name"].get<std::string>()] = r["calls_per_step"];
    INFO(backend << ": " << fused["profile"]["ranges"].dump().substr(0, 3000));
    if (backend.find("H100") != std::string::npos || backend.find("H200") != std::string::npos) {
      CHECK(calls["matmul_dw_adamw"] == 4 * 2 + 1);
      CHECK(calls.count("matmul_dw_adamw (product, adamw)") == 0);
    } else {
      CHECK(calls["matmul_dw_adamw (product, adamw)"] == 4 * 2 + 1);
    }
    for (const char* key : {"loss", "grad_norm"}) check_per_step(plain, fused, key, 7, 1e-3, "in_backward", "in_gemm");
    // the fused kernel needs no temporary, and with one microbatch the blocks keep only their gains' gradients: the
    // peak is not above in_backward's
    const double peak_plain = plain["memory"]["peak_bytes"].get<double>(),
                 peak_fused = fused["memory"]["peak_bytes"].get<double>();
    CHECK(peak_fused <= peak_plain);
  }
}
