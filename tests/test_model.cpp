// Whole-model tests on the CPU backend: gradient accumulation is exact, the flat layout matches the reference names,
// and the model's gradient agrees with a central finite difference of its own loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "jobs/job.h"
#include "model/model.h"
#include "test_helpers.h"

using namespace trainer;
namespace fs = std::filesystem;

namespace {

RunConfig tiny_run(const std::string& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.preset=tiny", "model.vocab_size=97", "model.context_length=16",
                                "device=cpu", "data.source=random", "data.batch_size=32", "optimizer.schedule=constant", "bench.warmup_steps=0",
                                "bench.measure_steps=1", "bench.log_every=0",
                                "output.results=" + dir + "/r.json", "output.checkpoint=" + dir + "/ck"};
  o.insert(o.end(), extra.begin(), extra.end());
  return load_config("", o, 1, false);
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

}  // namespace

TEST_CASE("gradient accumulation: 1x32, 4x8 and 32x1 microbatches give the same step", "[model]") {
  const fs::path dir = fs::temp_directory_path() / "trainer_test_accum";
  fs::create_directories(dir);
  struct Out {
    double loss, gnorm;
    std::map<std::string, HostTensor> w;
  };
  auto run = [&](int micro) {
    RunConfig c = tiny_run(dir.string(), {"data.microbatch_size=" + std::to_string(micro)});
    auto r = run_train(c, RunContext{});
    return Out{r["loss"]["per_step"][0].get<double>(), r["grad_norm"]["per_step"][0].get<double>(),
               read_safetensors((dir / "ck" / "model.safetensors").string())};
  };
  const Out a = run(32), b = run(8), c = run(1);
  for (const Out* o : {&b, &c}) {
    CHECK(rel(o->loss, a.loss) < 1e-5);
    CHECK(rel(o->gnorm, a.gnorm) < 1e-5);
    for (auto& [name, t] : a.w) {
      const auto& u = o->w.at(name);
      const float* x = reinterpret_cast<const float*>(t.bytes.data());
      const float* y = reinterpret_cast<const float*>(u.bytes.data());
      // Norm-wise per tensor: the first AdamW step divides each gradient element by its own magnitude, so an
      // element whose gradient is at rounding level (~1e-7 of the tensor's largest) moves by O(lr) either way;
      // the gradients themselves are compared elementwise in the next test case.
      double diff2 = 0, ref2 = 0;
      for (size_t i = 0; i < t.bytes.size() / 4; ++i) {
        diff2 += double(x[i] - y[i]) * double(x[i] - y[i]);
        ref2 += double(x[i]) * double(x[i]);
      }
      INFO(name);
      CHECK(std::sqrt(diff2 / ref2) < 1e-5);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("gradient accumulation: gradients of 1x32 and 32x1 microbatches agree elementwise", "[model]") {
  auto be = make_backend(Device::cpu, 0);
  const ModelDims d{97, 16, 64, 172, 2, 4, 10000.0};
  const int rows = 32, T = 16;
  std::vector<int32_t> in(rows * T), tg(rows * T);
  for (int i = 0; i < rows * T; ++i) {
    in[i] = (i * 7 + 3) % 97;
    tg[i] = (i * 5 + 1) % 97;
  }
  std::vector<std::vector<float>> grads;
  std::vector<double> losses;
  for (int micro : {32, 4, 1}) {
    Model m(*be, d, DType::f32, AttnImpl::naive);
    m.init_random(1);
    m.zero_grads();
    m.begin_step_losses(rows * T);
    for (int k = 0; k < rows / micro; ++k) {
      m.forward(in.data() + k * micro * T, tg.data() + k * micro * T, micro, T, true, 1.f / (rows * T),
                k * micro * T);
      m.backward(nullptr);
    }
    losses.push_back(m.step_loss_sum() / (rows * T));
    grads.emplace_back(m.grads().ptr<float>(), m.grads().ptr<float>() + m.flat_size());
    if (grads.size() == 1) continue;
    CHECK(rel(losses.back(), losses[0]) < 1e-6);
    for (const ParamInfo& p : m.layout().params()) {
      double max_diff = 0, max_ref = 0;
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
        max_diff = std::max(max_diff, double(std::fabs(grads.back()[i] - grads[0][i])));
        max_ref = std::max(max_ref, double(std::fabs(grads[0][i])));
      }
      INFO(p.name << " with microbatch " << micro);
      CHECK(max_diff / max_ref < 1e-5);  // per tensor, relative to its largest gradient
    }
  }
}

TEST_CASE("model: flat layout holds every reference parameter once, q/k/v and w1/w3 contiguous", "[model]") {
  ModelDims d{97, 16, 64, 172, 3, 4, 10000.0};
  ParamLayout L(d);
  CHECK(L.params().size() == 1 + 3 * 9 + 2);
  int64_t expect = 97 * 64 * 2 + 64 + 3 * (4 * 64 * 64 + 3 * 64 * 172 + 2 * 64);
  CHECK(L.count() == expect);
  for (int i = 0; i < 3; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    CHECK(L.find(p + "attn.k_proj.weight").offset == L.find(p + "attn.q_proj.weight").offset + 64 * 64);
    CHECK(L.find(p + "attn.v_proj.weight").offset == L.find(p + "attn.k_proj.weight").offset + 64 * 64);
    CHECK(L.find(p + "ffn.w3.weight").offset == L.find(p + "ffn.w1.weight").offset + 172 * 64);
  }
  // Units tile the buffer in order and each parameter lies inside its unit.
  for (auto& p : L.params()) {
    CHECK(p.offset >= L.unit_begin(p.unit));
    CHECK(p.offset + p.numel <= L.unit_end(p.unit));
  }
  for (int u = 1; u < L.num_units(); ++u) CHECK(L.unit_begin(u) >= L.unit_end(u - 1));
}

TEST_CASE("model: gradient equals a central finite difference of the loss", "[model]") {
  // fp32 model: the finite difference uses a step h = 1e-2 on chosen parameters and a loss summed in fp64; the
  // tolerance (2e-2 relative + 1e-4 absolute) covers fp32 rounding of the loss (~1e-6 relative over 2h).
  auto be = make_backend(Device::cpu, 0);
  ModelDims d{31, 9, 32, 40, 2, 4, 10000.0};
  Model m(*be, d, DType::f32, AttnImpl::naive);
  m.init_random(7);
  const int rows = 2, T = 9;
  std::vector<int32_t> in(rows * T), tg(rows * T);
  for (int i = 0; i < rows * T; ++i) {
    in[i] = (i * 7 + 3) % d.vocab_size;
    tg[i] = (i * 5 + 1) % d.vocab_size;
  }
  auto loss = [&]() {
    m.begin_step_losses(rows * T);
    m.forward(in.data(), tg.data(), rows, T, false, 0.f, 0);
    return m.step_loss_sum() / (rows * T);
  };
  m.zero_grads();
  m.begin_step_losses(rows * T);
  m.forward(in.data(), tg.data(), rows, T, true, 1.f / (rows * T), 0);
  m.backward(nullptr);
  Tensor P = m.params();
  float* p = P.ptr<float>();
  const float* g = m.grads().ptr<float>();
  int checked = 0;
  for (const ParamInfo& info : m.layout().params()) {
    for (int64_t k : {int64_t(0), info.numel / 2, info.numel - 1}) {
      const int64_t i = info.offset + k;
      const float saved = p[i], h = 1e-2f;
      p[i] = saved + h;
      const double lp = loss();
      p[i] = saved - h;
      const double lm = loss();
      p[i] = saved;
      const double fd = (lp - lm) / (2.0 * h);
      INFO(info.name << "[" << k << "]: analytic " << g[i] << " fd " << fd);
      CHECK(std::fabs(g[i] - fd) <= 1e-4 + 2e-2 * std::fabs(fd));
      ++checked;
    }
  }
  CHECK(checked == 3 * int(m.layout().params().size()));
}
