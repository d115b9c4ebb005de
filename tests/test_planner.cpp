// The planner (plan/planner.h) against real runs on the CPU backend: the dry run's predicted peak and its split by
// category must be within 5% of what the CpuBackend's MemoryStats measure over two real train steps (the same
// set-up and train_step), for every checkpointing policy, with and without microbatches; its FLOPs must equal the
// closed form 3 x forward_flops_per_token x tokens without recompute.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda_sizes.h"
#include "backend/meta/meta_backend.h"
#include "dist/meta_communicator.h"
#include "jobs/train_setup.h"
#include "jobs/train_step.h"
#include "model/model.h"
#include "plan/fit.h"
#include "plan/host_memory.h"
#include "parallel/fsdp_buffers.h"
#include "plan/planner.h"

using namespace trainer;

namespace {

/// Every value checkpointing.policy accepts (the lead extends this list with the policies; one place).
const std::vector<std::vector<std::string>> kPolicies = {
    {"checkpointing.policy=none"},
    {"checkpointing.policy=selective"},
    {"checkpointing.policy=full"},
    {"checkpointing.policy=every_k", "checkpointing.k=2"},
    {"checkpointing.policy=sqrt"},
    {"checkpointing.policy=nested"},
    {"checkpointing.policy=selective", "checkpointing.blocks=[0]"},
    {"checkpointing.policy=full", "checkpointing.lm_head_chunk_tokens=100"},
};

/// The models the planner is checked on: tiny, and small reduced to 2 layers at context 128 (a full small step takes
/// tens of seconds on a 2-core CI machine).
const std::vector<std::vector<std::string>> kModels = {
    {"model.preset=tiny"},
    {"model.preset=tiny", "model.num_layers=5"},  // checkpointed segments of several blocks, an uneven last one
    {"model.preset=small", "model.num_layers=2", "model.context_length=128"},
};

RunConfig run_config(const std::vector<std::string>& model, const std::vector<std::string>& policy, int batch,
                     int micro) {
  std::vector<std::string> o = model;
  o.insert(o.end(), policy.begin(), policy.end());
  for (const std::string& s :
       {std::string("device=cpu"), std::string("data.source=random"), "data.batch_size=" + std::to_string(batch),
        "data.microbatch_size=" + std::to_string(micro),
        std::string("bench.warmup_steps=0"), std::string("bench.measure_steps=2"), std::string("bench.log_every=0")})
    o.push_back(s);
  return load_config("", o, 1, false);
}

/// What the real run measures: set-up and `steps` train steps on the CpuBackend.
MemoryStats measure(const RunConfig& cfg, int steps) {
  auto be = make_backend(Device::cpu, 0);
  TrainSetup s = setup_training(cfg, *be, nullptr, 1, /*init_weights=*/true);
  std::mt19937 rng(1);
  std::vector<int32_t> in(size_t(s.rank_tokens)), tg(size_t(s.rank_tokens));
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t(rng() % uint32_t(s.dims.vocab_size));
      tg[i] = int32_t(rng() % uint32_t(s.dims.vocab_size));
    }
    s.model->begin_step_losses(s.rank_tokens);
    s.model->set_step_tokens(in.data(), tg.data());
    train_step(*be, *s.model, *s.strategy, s.shape, 1e-3, cfg.optimizer.max_grad_norm);
    REQUIRE(std::isfinite(s.model->step_loss_sum()));
  }
  return be->memory();
}

double rel(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1.0); }

}  // namespace

TEST_CASE("planner: predicted peak and categories within 5% of a real CPU run, every policy", "[planner]") {
  for (const auto& model : kModels) {
    for (const std::vector<std::string>& policy : kPolicies) {
      for (const auto& [batch, micro] : std::vector<std::pair<int, int>>{{2, 2}, {4, 1}}) {
        const RunConfig cfg = run_config(model, policy, batch, micro);
        INFO(model[0] << (model.size() > 1 ? " (reduced)" : "") << ", " << policy[0]
                      << (policy.size() > 1 ? " " + policy[1] : "") << ", batch " << batch
                      << " in microbatches of " << micro);
        const Plan plan = make_plan(cfg, 1);
        const MemoryStats real = measure(cfg, 2);
        INFO("predicted peak " << plan.peak_bytes << " B in " << plan.peak_phase << ", measured " << real.peak_total
                               << " B in " << real.peak_phase);
        CHECK(rel(double(plan.peak_bytes), double(real.peak_total)) <= 0.05);
        for (int i = 0; i < kNumCategories; ++i) {
          INFO("category " << category_name(Category(i)) << ": predicted " << plan.by_category[size_t(i)]
                           << " B, measured " << real.at_peak[size_t(i)] << " B");
          const double diff = std::fabs(double(plan.by_category[size_t(i)]) - double(real.at_peak[size_t(i)]));
          CHECK((diff <= 0.05 * double(real.at_peak[size_t(i)]) || diff <= 64 * 1024));
        }
        CHECK(plan.peak_phase == std::string(real.peak_phase));
        CHECK(plan.time_s > 0);
      }
    }
  }
}

TEST_CASE("planner: FLOPs per step are 3 x forward_flops_per_token x tokens without recompute", "[planner]") {
  for (const auto& model : kModels) {
    const RunConfig cfg = run_config(model, {"checkpointing.policy=none"}, 4, 2);
    const Plan plan = make_plan(cfg, 1);
    const double want = 3.0 * forward_flops_per_token(model_dims(cfg.model)) * double(cfg.data.batch_size) *
                        double(cfg.model.context_length);
    INFO(model[0] << ": plan " << plan.flops << " FLOPs, closed form " << want);
    CHECK(rel(plan.flops, want) <= 0.01);
    // The forward alone is a third of it.
    RunConfig fwd = cfg;
    fwd.bench.phase = "forward";
    CHECK(rel(make_plan(fwd, 1).flops, want / 3) <= 0.01);
  }
}

TEST_CASE("planner: the cuda target mirrors the CUDA backend's own buffers", "[planner]") {
  // bf16 flash2 on the meta cuda backend: the planner needs no GPU. The workspace holds at least the cuBLASLt
  // workspace (32 MiB) and the reduction partials; parameters are fp32 master + bf16 copy (6 bytes per element).
  RunConfig cfg = load_config(
      "", {"model.preset=tiny", "device=cuda", "precision=bf16", "data.source=random", "data.batch_size=2"}, 1, true);
  const Plan p = make_plan(cfg, 1);
  const ModelDims d = model_dims(cfg.model);
  const ParamLayout layout(d);
  CHECK(p.device == "cuda");
  CHECK(p.by_category[size_t(Category::workspace)] >= (size_t(32) << 20) + 1025 * 8);
  CHECK(p.category_peaks[size_t(Category::parameters)] >= size_t(layout.total()) * 6);
  CHECK(p.category_peaks[size_t(Category::parameters)] <= size_t(layout.total() + 64) * 6);
  CHECK(p.device_memory_bytes > 0);

  // Strategies over several ranks (zero1's shards, NCCL vs MPI) are checked through the binary
  // (tests/cli/test_plan.py): their set-up still calls MPI directly, which this executable does not initialise.
}

TEST_CASE("planner: --gpu h100 keeps the bytes and FLOPs, takes the H100's memory and HBM bandwidth", "[planner]") {
  // The same dry run: every byte and FLOP equal; the memory-bound time scales by the HBM ratio (4.8 / 3.35 TB/s),
  // the compute-bound time not at all; the memory is what an H100 80GB reported (79.2 GiB).
  RunConfig cfg = load_config(
      "", {"model.preset=tiny", "device=cuda", "precision=bf16", "data.source=random", "data.batch_size=2"}, 1, true);
  const Plan h200 = make_plan(cfg, 1, 0, "h200"), h100 = make_plan(cfg, 1, 0, "h100");
  CHECK(h200.peak_bytes == h100.peak_bytes);
  CHECK(h200.category_peaks == h100.category_peaks);
  CHECK(h200.flops == h100.flops);
  CHECK(h200.bytes_moved == h100.bytes_moved);
  CHECK(h100.compute_s == Approx(h200.compute_s).epsilon(1e-12));
  CHECK(h100.memory_s == Approx(h200.memory_s * 4.8 / 3.35).epsilon(1e-9));
  CHECK(h100.memory_s > h200.memory_s);
  CHECK(h200.device_memory_bytes == size_t(143156) << 20);
  CHECK(h100.device_memory_bytes == size_t(85017493504ull));
  CHECK(h100.rates.device == "cuda (H100 80GB)");
  CHECK(make_plan(cfg, 1).device_memory_bytes == h200.device_memory_bytes);  // the default: an H200
  CHECK_THROWS_WITH(make_plan(cfg, 1, 0, "a100"), Catch::Contains("unknown GPU 'a100' (known: h200, h100)"));
  // a run picks its GPU's rates by the device's name (an H100 80GB's; anything else an H200's)
  CHECK(gpu_of_device_name("NVIDIA H100 80GB HBM3") == "h100");
  CHECK(gpu_of_device_name("NVIDIA H200") == "h200");
  CHECK(gpu_of_device_name("NVIDIA H100 PCIe") == "h200");
  CHECK(gpu_of_device_name("") == "h200");
}

TEST_CASE("meta backend: the fused dW + AdamW kernel costs its product, then its epilogue's bytes", "[planner]") {
  // One call on an xl W13-like shape (M 20480, N 2560, K 2048 tokens; bf16 operands, fp32 p, m, v, bf16 p_work): one
  // op; its product at dw_adamw_gemm (0.83 of the bf16 GEMM rate), its epilogue's 26 bytes a weight at the memory
  // rate times dw_adamw_epilogue_exposed (0.84 on the H200, the default target, v34: the rest ran under the
  // products), added (not the slower of the two); grad_in (accumulate) adds 4 bytes a weight.
  MetaBackend be(Device::cuda);
  const MetaRates& r = be.rates();
  CHECK(r.dw_adamw_gemm == Approx(0.83 * r.gemm_bf16));
  CHECK(r.dw_adamw_epilogue_exposed == Approx(0.84));
  // the H100's own fit (v33)
  CHECK(MetaBackend(Device::cuda, BackendOptions{}, "h100").rates().dw_adamw_epilogue_exposed == Approx(0.71));
  const int64_t M = 20480, N = 2560, K = 2048;
  Buffer pb = be.alloc(size_t(M * N) * 4, Category::parameters), wb = be.alloc(size_t(M * N) * 2, Category::parameters);
  Buffer mb = be.alloc(size_t(M * N) * 4, Category::optimizer), vb = be.alloc(size_t(M * N) * 4, Category::optimizer);
  Buffer gb = be.alloc(size_t(M * N) * 4, Category::gradients);
  Buffer yb = be.alloc(size_t(K * M) * 2, Category::activations), xb = be.alloc(size_t(K * N) * 2, Category::activations);
  const Tensor p(pb.data(), DType::f32, Device::cuda, {M, N}), m(mb.data(), DType::f32, Device::cuda, {M, N}),
      v(vb.data(), DType::f32, Device::cuda, {M, N}), pw(wb.data(), DType::bf16, Device::cuda, {M, N}),
      g(gb.data(), DType::f32, Device::cuda, {M, N}), dY(yb.data(), DType::bf16, Device::cuda, {K, M}),
      X(xb.data(), DType::bf16, Device::cuda, {K, N});
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const double operands = double(dY.bytes() + X.bytes()), epilogue = 26.0 * double(M * N);
  be.matmul_dw_adamw(p, m, v, pw, dY, X, AdamWArgs{}, Tensor(), false);
  CHECK(be.cost().ops == 1);
  CHECK(be.cost().flops == flops);
  CHECK(be.cost().bytes == Approx(operands + epilogue));
  CHECK(be.cost().compute_s == Approx(flops / r.dw_adamw_gemm));
  CHECK(be.cost().memory_s == Approx(0.84 * epilogue / r.memory_bandwidth));
  be.reset_cost();
  be.matmul_dw_adamw(p, m, v, pw, dY, X, AdamWArgs{}, g, true);
  CHECK(be.cost().memory_s == Approx(0.84 * (epilogue + double(g.bytes())) / r.memory_bandwidth));
}

TEST_CASE("meta backend: fake addresses, no-op ops that count FLOPs and bytes", "[planner]") {
  MetaBackend be(Device::cpu);
  Buffer a = be.alloc(1000, Category::activations), b = be.alloc(1, Category::workspace);
  CHECK(a.data() != b.data());
  CHECK(reinterpret_cast<uintptr_t>(a.data()) % 256 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 256 == 0);
  CHECK(be.memory().total == 1001);
  const Tensor A(a.data(), DType::f32, Device::cpu, {5, 7}), B(a.data(), DType::f32, Device::cpu, {3, 7}),
      C(a.data(), DType::f32, Device::cpu, {5, 3});
  be.matmul(C, A, false, B, true, 1.f, 0.f);
  CHECK(be.cost().flops == 2.0 * 5 * 3 * 7);
  CHECK(be.cost().bytes == double(A.bytes() + B.bytes() + C.bytes()));
  CHECK(be.sum(C) == 0.0);
  a.reset();
  CHECK(be.memory().total == 1);
  CHECK(be.memory().peak_total == 1001);
}

TEST_CASE("meta communicator: collectives on a stream of their own beside the compute stream's clock", "[planner]") {
  // Worked by hand: 2 ranks, bus bandwidth 1e11 B/s, an all_reduce of n f32 moves 2 (N-1) / N x 4n = 4n bytes and takes
  // latency + 4n / 1e11 s; a fill of m f32 on the cpu target's nominal 10 GB/s takes 4m / 1e10 s.
  MetaBackend be(Device::cpu);
  const double bw = 1e11;
  Buffer gb = be.alloc(size_t(4) << 20, Category::gradients), xb = be.alloc(size_t(4) << 22, Category::activations);
  const Tensor g(gb.data(), DType::f32, Device::cpu, {int64_t(1) << 20});   // 4 MiB
  const Tensor x(xb.data(), DType::f32, Device::cpu, {int64_t(1) << 22});   // 16 MiB
  const double lat = MetaCommunicator::default_latency("nccl");
  const double t_ar = lat + 4.0 * double(g.numel()) / bw;  // ~52 us
  const double t_fill = 4.0 * double(x.numel()) / 10e9;     // ~1.68 ms: longer than the all_reduce
  REQUIRE(t_fill > 2 * t_ar);
  SECTION("synchronous: the stream waits for it") {
    MetaCommunicator comm(0, 2, "nccl", bw, &be);
    comm.all_reduce(g, ReduceOp::sum);
    CHECK(be.now() == Approx(t_ar));
    CHECK(be.cost().comm_wait_s == Approx(t_ar));
    CHECK(comm.seconds() == Approx(t_ar));
    CHECK(comm.bytes() == 4.0 * double(g.numel()));
  }
  SECTION("asynchronous under a longer op: hidden") {
    MetaCommunicator comm(0, 2, "nccl", bw, &be);
    auto w = comm.all_reduce(g, ReduceOp::sum, /*async=*/true);
    be.fill(x, 0.f);
    w->wait();
    CHECK(be.now() == Approx(t_fill));
    CHECK(be.cost().comm_wait_s == 0.0);
    CHECK(comm.free_at() == Approx(t_ar));
  }
  SECTION("asynchronous, waited for before it ends: the rest is exposed") {
    MetaCommunicator comm(0, 2, "nccl", bw, &be);
    be.fill(x, 0.f);
    auto w1 = comm.all_reduce(g, ReduceOp::sum, true);  // starts at t_fill
    auto w2 = comm.all_reduce(g, ReduceOp::sum, true);  // behind the first on the communicator's stream
    CHECK(comm.free_at() == Approx(t_fill + 2 * t_ar));
    w1->wait();
    CHECK(be.now() == Approx(t_fill + t_ar));
    w2->wait();
    CHECK(be.now() == Approx(t_fill + 2 * t_ar));
    CHECK(be.cost().comm_wait_s == Approx(2 * t_ar));
    CHECK(comm.collectives() == 2);
  }
  SECTION("grouped: one latency with NCCL, one per buffer with MPI") {
    MetaCommunicator nccl(0, 2, "nccl", bw, &be);
    nccl.all_reduce_many({g, g, g}, ReduceOp::sum, true);
    CHECK(nccl.seconds() == Approx(lat + 3 * 4.0 * double(g.numel()) / bw));
    CHECK(nccl.collectives() == 1);
    MetaCommunicator mpi(0, 2, "mpi", bw, &be);
    mpi.all_reduce_many({g, g, g}, ReduceOp::sum, true);
    CHECK(mpi.seconds() == Approx(3 * MetaCommunicator::default_latency("mpi") + 3 * 4.0 * double(g.numel()) / bw));
    CHECK(mpi.collectives() == 3);
  }
  SECTION("mpi: an asynchronous collective holds the stream at once (Open MPI progresses it only inside MPI calls)") {
    MetaCommunicator comm(0, 2, "mpi", bw, &be);
    auto w = comm.all_reduce(g, ReduceOp::sum, true);
    const double t = MetaCommunicator::default_latency("mpi") + 4.0 * double(g.numel()) / bw;
    CHECK(be.now() == Approx(t));
    be.fill(x, 0.f);
    w->wait();
    CHECK(be.now() == Approx(t + t_fill));
  }
  SECTION("a split communicator shares the accounting and the queue") {
    MetaCommunicator comm(0, 2, "nccl", bw, &be);
    auto w1 = comm.all_reduce(g, ReduceOp::sum, true);
    auto sub = comm.split(0, 0);
    auto w2 = sub->all_reduce(g, ReduceOp::sum, true);  // behind the parent's
    CHECK(comm.free_at() == Approx(2 * t_ar));
    CHECK(comm.seconds() == Approx(2 * t_ar));
    CHECK(comm.collectives() == 2);
    w2->wait();
    CHECK(be.now() == Approx(2 * t_ar));
    comm.reset_cost();
    CHECK(static_cast<MetaCommunicator&>(*sub).collectives() == 0);
  }
  SECTION("bf16 on the wire: half the bytes; the casts there and back are charged to the compute stream") {
    MetaCommunicator comm(0, 2, "nccl", bw, &be);
    Buffer wb = be.alloc(size_t(2) << 20, Category::communication);
    const Tensor wire(wb.data(), DType::bf16, Device::cpu, {g.numel()});
    comm.all_reduce_many_via({g}, {wire}, ReduceOp::sum);
    const double casts = 2 * 6.0 * double(g.numel()) / 10e9;  // f32 -> bf16 and back, 6 bytes an element each
    CHECK(comm.bytes() == 2.0 * double(g.numel()));
    CHECK(be.now() == Approx(casts + lat + 2.0 * double(g.numel()) / bw));
  }
  SECTION("one rank: nothing to send") {
    MetaCommunicator comm(0, 1, "nccl", bw, &be);
    comm.all_reduce(g, ReduceOp::sum);
    CHECK(be.now() == 0.0);
    CHECK(comm.seconds() == 0.0);
    CHECK(comm.collectives() == 0);
  }
}

TEST_CASE("meta backend: the Hopper attention rates by sequence length, against an H200's", "[planner]") {
  // xl's attention (4 x 32 heads of 80, causal, bf16), forward and backward timed in rounds on one H200
  // (results/h200/2026-12-03/v22/call2/rounds.log), executed TFLOP/s. The planner's rates (H200 figures at T 16384
  // and a per-tile cost, MetaRates::sm90_seq_len_factor) must give each within 25% (a constant rate: 5x at T 512).
  struct Point {
    int T;
    double fwd, bwd;
  };
  for (const Point pt : {Point{512, 103.7, 113.9}, Point{2048, 367.5, 276.6}, Point{16384, 491.2, 380.3}}) {
    MetaBackend be(Device::cuda);
    const AttnShape s{4, pt.T, 32, 80, true, 1.f / std::sqrt(80.f)};
    const int64_t rows = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
    Buffer buf = be.alloc(size_t(rows * 3 * D * 2), Category::activations);  // shapes only: nothing is read
    const Tensor qkv(buf.data(), DType::bf16, Device::cuda, {rows, 3 * D}),
        out(buf.data(), DType::bf16, Device::cuda, {rows, D}),
        lse(buf.data(), DType::f32, Device::cuda, {int64_t(s.B), int64_t(s.H), int64_t(s.T)});
    INFO("T " << pt.T);
    be.reset_cost();
    be.attention_fwd(AttnImpl::flash2, s, out, lse, Tensor(), qkv);
    const double fwd = be.cost().executed_flops / be.cost().compute_s / 1e12;
    CHECK(std::abs(fwd / pt.fwd - 1) < 0.25);
    be.reset_cost();
    be.attention_bwd(AttnImpl::flash2, s, qkv, out, qkv, out, lse, Tensor());
    const double bwd = be.cost().executed_flops / be.cost().compute_s / 1e12;
    CHECK(std::abs(bwd / pt.bwd - 1) < 0.25);
  }
  const MetaRates r = MetaRates::for_target(Device::cuda, Fp32Matmul::ieee);
  CHECK(r.sm90_seq_len_factor(16384, r.attention_sm90_fwd_t0) == 1.0);
  CHECK(r.sm90_seq_len_factor(65536, r.attention_sm90_fwd_t0) == 1.0);
  CHECK(r.sm90_seq_len_factor(512, 0) == 1.0);
  CHECK(r.sm90_seq_len_factor(512, r.attention_sm90_fwd_t0) < r.sm90_seq_len_factor(2048, r.attention_sm90_fwd_t0));
}

TEST_CASE("meta backend: deterministic's attention backward: the Hopper kernel's ordered dQ, or the mma.sync dQ pass",
          "[planner]") {
  // xl's attention at T 512 and 2048 (4 x 32 heads of 80, causal, bf16) takes the Hopper backward in both modes (5
  // products, 2.5x the forward's executed FLOPs; deterministic: its dQ contributions in key-tile order, the time
  // attention_det_bwd_sm90 times the default's) with the same workspace (D, the dQ accumulators and their tile words;
  // xl's shapes never split). d_head 32, which has no Hopper kernel: the mma.sync dK/dV pass and a dQ pass that
  // recomputes S and dP (7 products: 3.5x) at the mma.sync kernels' bf16 rate (fitted to T 512), and only D [B, H, T]
  // f32 in the workspace (flash_api.cu's bwd_workspace_bytes).
  for (int d : {80, 32})
    for (int T : {512, 2048}) {
      CAPTURE(d, T);
      const AttnShape s{4, T, 32, d, true, 1.f / std::sqrt(float(d))};
      BackendOptions det_opts;
      det_opts.deterministic = true;
      MetaBackend atomic(Device::cuda), det(Device::cuda, det_opts);
      double exec[2], secs[2];
      size_t scratch[2];
      for (int i = 0; i < 2; ++i) {
        MetaBackend& be = i ? det : atomic;
        const int64_t rows = int64_t(s.B) * s.T, D = int64_t(s.H) * s.d_head;
        Buffer buf = be.alloc(size_t(rows * 3 * D * 2), Category::activations);  // shapes only: nothing is read
        const Tensor qkv(buf.data(), DType::bf16, Device::cuda, {rows, 3 * D}),
            out(buf.data(), DType::bf16, Device::cuda, {rows, D}),
            lse(buf.data(), DType::f32, Device::cuda, {int64_t(s.B), int64_t(s.H), int64_t(s.T)});
        const size_t before = be.memory().current[size_t(Category::workspace)];  // cuBLASLt's, no scratch yet
        be.reset_cost();
        be.attention_bwd(AttnImpl::flash2, s, qkv, out, qkv, out, lse, Tensor());
        exec[i] = be.cost().executed_flops;
        secs[i] = be.cost().compute_s;
        scratch[i] = be.memory().current[size_t(Category::workspace)] - before;
      }
      // model FLOPs of the backward: 2 x the forward's 4 B T^2 H d; causal executes a quarter of them in the forward
      const double fwd_exec = 4.0 * s.B * s.H * double(s.T) * s.T * s.d_head / 2;
      const MetaRates& r = det.rates();
      const size_t rows = size_t(s.B) * s.H * size_t(s.T);  // the scratch buffer grows in rounded steps
      CHECK(exec[0] == Approx(2.5 * fwd_exec));
      CHECK(scratch[0] ==
            cuda_sizes::scratch_grown(0, cuda_sizes::flash_bwd_workspace_bytes_h200(s, DType::bf16, false)));
      if (d == 80) {
        CHECK(exec[1] == Approx(exec[0]));
        CHECK(secs[1] == Approx(secs[0] * r.attention_det_bwd_sm90));
        CHECK(r.attention_det_bwd_sm90 > 1.0);
        CHECK(scratch[1] == scratch[0]);
        CHECK(scratch[1] > cuda_sizes::scratch_grown(0, cuda_sizes::align256(rows * 4)));
      } else {
        CHECK(exec[1] == Approx(3.5 * fwd_exec));
        CHECK(secs[1] == Approx(exec[1] / (r.attention_bf16 * r.sm90_seq_len_factor(T, r.attention_det_bwd_t0))));
        CHECK(secs[1] > 1.5 * secs[0]);  // v47 on an H100 at T 512 (d 80, then on these kernels): 0.202 against 0.114
        CHECK(scratch[1] == cuda_sizes::scratch_grown(0, cuda_sizes::align256(rows * 4)));
        CHECK(scratch[0] > scratch[1]);
      }
    }
  // a cpu plan: the cpu backend has no such mode (BackendOptions::deterministic is the CUDA backend's)
  BackendOptions det_opts;
  det_opts.deterministic = true;
  double exec[2];
  for (int i = 0; i < 2; ++i) {
    MetaBackend be(Device::cpu, i ? det_opts : BackendOptions{});
    const AttnShape s{2, 64, 4, 16, true, 0.25f};
    Buffer buf = be.alloc(size_t(2 * 64 * 3 * 64 * 4), Category::activations);
    const Tensor qkv(buf.data(), DType::f32, Device::cpu, {128, 192}),
        out(buf.data(), DType::f32, Device::cpu, {128, 64}), lse(buf.data(), DType::f32, Device::cpu, {2, 4, 64});
    be.attention_bwd(AttnImpl::flash2, s, qkv, out, qkv, out, lse, Tensor());
    exec[i] = be.cost().executed_flops;
  }
  CHECK(exec[1] == exec[0]);
}

TEST_CASE("flash backward split rule: chunks worked out by hand on 132 SMs", "[planner][flash]") {
  // cuda_sizes::flash_dkdv_chunk, 128-key x 64-query tiles (the Hopper backward's), 132 SMs. The expected values are
  // the rule's definition worked through on paper: C = key tiles x bh CTAs, slots = CTAs per SM x 132, pairs = the
  // (key tile, query tile) steps (causal: key tile n skips 2n query tiles), chunk = max(2, ceil(pairs bh / 528)),
  // share = ceil(pairs bh / slots); no split when C >= slots, chunk >= query tiles, or query tiles < min_gain x
  // max(chunk, share) (Hopper: 1 CTA per SM, min_gain 2; mma.sync: 2 and 1).
  using cuda_sizes::flash_dkdv_chunk;
  constexpr int64_t sms = 132;
  // 4 x 12 heads, T 512 (the small model): 4 key tiles x 48 = 192 CTAs >= 132 slots: no split on Hopper; on mma.sync
  // 192 < 264, pairs 8 + 6 + 4 + 2 = 20 (x 48 = 960), chunk 2, share ceil(960 / 264) = 4, 8 >= 4: chunks of 2.
  CHECK(flash_dkdv_chunk(512, 128, 64, 48, true, true, sms) == 0);
  CHECK(flash_dkdv_chunk(512, 128, 64, 48, true, false, sms) == 2);
  // 4 x 8 heads, T 512: 128 CTAs < 132; pairs 20 x 32 = 640, chunk 2, share ceil(640 / 132) = 5; 8 < 2 x 5: no split.
  CHECK(flash_dkdv_chunk(512, 128, 64, 32, true, true, sms) == 0);
  // One head, T 16384, causal: 128 CTAs; 256 query tiles; pairs 128 x 256 - 2 (0 + .. + 127) = 16512; chunk
  // ceil(16512 / 528) = 32, share ceil(16512 / 132) = 126; 256 >= 252: chunks of 32. Not causal: pairs 32768, chunk
  // 63, share 249; 256 < 498 (every CTA already runs 256 steps): no split.
  CHECK(flash_dkdv_chunk(16384, 128, 64, 1, true, true, sms) == 32);
  CHECK(flash_dkdv_chunk(16384, 128, 64, 1, false, true, sms) == 0);
  // One head, T 1000: 8 key tiles, 16 query tiles, pairs 16 + 14 + .. + 2 = 72, chunk 2, share 1: 16 >= 4.
  CHECK(flash_dkdv_chunk(1000, 128, 64, 1, true, true, sms) == 2);
  // The shortest split: T 192 has 3 query tiles (pairs 3 + 1, chunk 2, share 1: 3 < 4), T 193 has 4 (4 >= 4).
  CHECK(flash_dkdv_chunk(192, 128, 64, 1, true, true, sms) == 0);
  CHECK(flash_dkdv_chunk(193, 128, 64, 1, true, true, sms) == 2);
  // One query tile: a chunk of 2 would cover it.
  CHECK(flash_dkdv_chunk(1, 128, 64, 1, true, true, sms) == 0);
  CHECK(flash_dkdv_chunk(1, 128, 64, 1, true, false, sms) == 0);
}

TEST_CASE("host memory: the cpu lower bound of the tensors stays below what the plan holds of them", "[planner]") {
  // Found by a fresh user: the bound counted 16 bytes a parameter whatever the storage, so bf16_pure and
  // optimizer.in_backward runs the plan said fit were refused. The plan's weights, gradients and optimizer state at
  // its peak (the dry run of the real code) must be at least the bound, for every storage the cpu runs.
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{},  // in_backward on (auto)
                                             {"optimizer.max_grad_norm=1.0"},  // off: flat gradients
                                             {"precision=bf16_pure"},
                                             {"precision=bf16_pure", "optimizer.in_backward=false"}}) {
    std::vector<std::string> o{"model.preset=tiny", "device=cpu", "data.source=random", "data.batch_size=1",
                               "model.context_length=8"};
    o.insert(o.end(), extra.begin(), extra.end());
    const RunConfig cfg = load_config("", o, 1, false);
    const Plan plan = make_plan(cfg, 1);
    const size_t held = plan.by_category[size_t(Category::parameters)] +
                        plan.by_category[size_t(Category::gradients)] + plan.by_category[size_t(Category::optimizer)];
    const size_t bound = host_memory_needed(cfg, 1, 1, false).tensors;
    INFO((extra.empty() ? std::string("default") : extra[0]) << ": bound " << bound << ", plan " << held);
    CHECK(bound <= held);
    CHECK(bound >= held * 9 / 10);  // and close: it is the same tensors
  }
}

TEST_CASE("planner: --fit finds the fewest recomputed blocks that fit, and the sets reproduce the plan", "[planner]") {
  // tiny with 6 layers at context 256 on the cpu: activations dominate, so each recomputed block lowers the peak
  const std::vector<std::string> model = {"model.preset=tiny", "model.num_layers=6", "model.context_length=256"};
  const RunConfig cfg = run_config(model, {"checkpointing.policy=none"}, 8, 8);
  const size_t none_peak = make_plan(cfg, 1).peak_bytes;
  RunConfig all = cfg;
  all.checkpointing.policy = "full";
  const size_t full_peak = make_plan(all, 1).peak_bytes;
  REQUIRE(full_peak < none_peak);
  const size_t budget = full_peak + (none_peak - full_peak) / 3;  // between: some blocks must be recomputed

  const FitSearch s = search_fit(cfg, 1, budget);
  REQUIRE(!s.options.empty());
  for (size_t i = 1; i < s.options.size(); ++i) CHECK(s.options[i - 1].time_s <= s.options[i].time_s);
  bool found_blocks = false;
  for (const FitOption& o : s.options) {
    INFO(o.what);
    // the option's --set arguments, applied to the run's config, give the plan the search reported, within budget
    std::vector<std::string> sets = model;
    for (const std::string& kv : {"checkpointing.policy=none", "device=cpu", "data.source=random",
                                  "data.batch_size=8", "data.microbatch_size=8", "bench.warmup_steps=0",
                                  "bench.measure_steps=2", "bench.log_every=0"})
      sets.push_back(kv);
    sets.insert(sets.end(), o.sets.begin(), o.sets.end());
    const RunConfig c = load_config("", sets, 1, false);
    const Plan p = make_plan(c, 1);
    CHECK(p.peak_bytes == o.peak_bytes);
    CHECK(p.time_s == Approx(o.time_s));
    CHECK(p.peak_bytes <= budget);
    if (c.checkpointing.policy == "full" && !c.checkpointing.keep_attention) {
      // the fewest: one block fewer does not fit
      found_blocks = true;
      const size_t k = c.checkpointing.blocks->size();
      REQUIRE(k >= 1);
      RunConfig fewer = c;
      fewer.checkpointing.blocks->pop_back();
      CHECK(make_plan(fewer, 1).peak_bytes > budget);
    }
  }
  // (an option beaten in time and peak by another, as the blocks at this microbatch can be by a smaller microbatch,
  // is left out:) the blocks family at one row a step, where no smaller microbatch exists, is listed with the
  // fewest blocks that fit
  if (!found_blocks) {
    const RunConfig one = run_config(model, {"checkpointing.policy=none"}, 1, 1);
    RunConfig one_full = one;
    one_full.checkpointing.policy = "full";
    const size_t one_none_peak = make_plan(one, 1).peak_bytes, one_full_peak = make_plan(one_full, 1).peak_bytes;
    const size_t one_budget = one_full_peak + (one_none_peak - one_full_peak) / 3;
    const FitSearch r = search_fit(one, 1, one_budget);
    const auto blocks = std::find_if(r.options.begin(), r.options.end(), [](const FitOption& o) {
      return o.what.find("blocks recomputed") != std::string::npos && o.what.find("attention") == std::string::npos;
    });
    REQUIRE(blocks != r.options.end());
    std::vector<std::string> sets = model;
    for (const std::string& kv : {"checkpointing.policy=none", "device=cpu", "data.source=random",
                                  "data.batch_size=1", "data.microbatch_size=1", "bench.warmup_steps=0",
                                  "bench.measure_steps=2", "bench.log_every=0"})
      sets.push_back(kv);
    sets.insert(sets.end(), blocks->sets.begin(), blocks->sets.end());
    RunConfig fewer = load_config("", sets, 1, false);
    CHECK(make_plan(fewer, 1).peak_bytes == blocks->peak_bytes);
    REQUIRE(fewer.checkpointing.blocks->size() >= 1);
    fewer.checkpointing.blocks->pop_back();
    CHECK(make_plan(fewer, 1).peak_bytes > one_budget);
  }

  // below what any policy reaches at this microbatch: a smaller microbatch, named in the sets
  RunConfig nested = cfg;
  nested.checkpointing.policy = "nested";
  const FitSearch small = search_fit(cfg, 1, make_plan(nested, 1).peak_bytes - 1);
  REQUIRE(!small.options.empty());
  for (const FitOption& o : small.options) {
    INFO(o.what);
    CHECK(o.peak_bytes < make_plan(nested, 1).peak_bytes);
    CHECK(std::find_if(o.sets.begin(), o.sets.end(), [](const std::string& kv) {
            return kv.rfind("data.microbatch_size=", 0) == 0;
          }) != o.sets.end());
  }
  // and nothing at all under a budget of one byte
  CHECK(search_fit(cfg, 1, 1).options.empty());

  // the run's own plans handed in (as trainer --plan --fit does): the same options, without planning it again
  const FitSearch given = search_fit(cfg, 1, budget, "h200", {make_plan(cfg, 1)});
  REQUIRE(given.options.size() == s.options.size());
  for (size_t i = 0; i < s.options.size(); ++i) {
    CHECK(given.options[i].sets == s.options[i].sets);
    CHECK(given.options[i].peak_bytes == s.options[i].peak_bytes);
    CHECK(given.options[i].time_s == s.options[i].time_s);
  }
  CHECK(given.plans == s.plans);  // the handed-in plan counts as one of the dry runs
  CHECK(given.state_bytes == s.state_bytes);
}

TEST_CASE("planner: --fit of a run that fits leads with policy none, whose recompute-free plan is the fastest",
          "[planner]") {
  // selective recomputes each block's RMSNorm outputs and SwiGLU product in the backward (about 1-2% of an xl or small
  // step on a GPU, results/NOTES.md v52); where keeping them fits, --fit says so first, with the memory it costs
  const std::vector<std::string> model = {"model.preset=tiny", "model.num_layers=4"};
  RunConfig cfg = run_config(model, {"checkpointing.policy=selective"}, 4, 4);
  RunConfig none = cfg;
  none.checkpointing.policy = "none";
  const Plan sel_plan = make_plan(cfg, 1), none_plan = make_plan(none, 1);
  REQUIRE(none_plan.peak_bytes > sel_plan.peak_bytes);
  REQUIRE(none_plan.time_s < sel_plan.time_s);
  const FitSearch roomy = search_fit(cfg, 1, none_plan.peak_bytes);
  REQUIRE(roomy.options.size() >= 2);
  const FitOption& first = roomy.options.front();
  INFO(first.what);
  CHECK(first.what == "nothing recomputed (policy none)");
  CHECK(std::find(first.sets.begin(), first.sets.end(), "checkpointing.policy=none") != first.sets.end());
  CHECK(first.peak_bytes == none_plan.peak_bytes);
  CHECK(first.time_s == Approx(none_plan.time_s));
  CHECK(std::any_of(roomy.options.begin(), roomy.options.end(), [&](const FitOption& o) {
    return o.what == "as configured" && o.peak_bytes == sel_plan.peak_bytes;
  }));
  // one byte less and policy none is not offered at the run's microbatch
  for (const FitOption& o : search_fit(cfg, 1, none_plan.peak_bytes - 1).options)
    CHECK(o.what != "nothing recomputed (policy none)");
}

TEST_CASE("planner: a forward-only run keeps no gradients, AdamW state or stores; forward + backward no AdamW state",
          "[planner]") {
  // As PyTorch's inference vs training-step memory (CS336 a2 memory profiling): measured on the CPU backend and
  // planned, by category. The forward keeps one block's activations at a time, not every block's store.
  const std::vector<std::string> model = {"model.preset=tiny", "model.num_layers=4"};
  size_t peaks[3] = {};
  const char* phases[3] = {"forward", "forward_backward", "train_step"};
  for (int i = 0; i < 3; ++i) {
    RunConfig cfg = run_config(model, {"checkpointing.policy=selective"}, 4, 4);
    cfg.bench.phase = phases[i];
    cfg.optimizer.in_backward = false;
    INFO("phase " << phases[i]);
    const MemoryStats real = measure(cfg, 2);
    const Plan plan = make_plan(cfg, 1);
    CHECK(plan.peak_bytes == real.peak_total);
    peaks[i] = real.peak_total;
    const size_t grads = real.peak[size_t(Category::gradients)], adam = real.peak[size_t(Category::optimizer)];
    const size_t params = real.peak[size_t(Category::parameters)];
    if (i == 0) CHECK(grads == 0);
    else CHECK(grads == params);  // fp32: the flat gradient buffer
    if (i < 2) CHECK(adam < 1024);  // only AdamW's per-step constants
    else CHECK(adam >= 2 * params);
  }
  CHECK(peaks[0] < peaks[1]);
  CHECK(peaks[1] < peaks[2]);
  // the forward's activations: one block's store at most (the stored blocks' stores of the others are gone)
  RunConfig fwd = run_config(model, {"checkpointing.policy=selective"}, 4, 4);
  fwd.bench.phase = "forward";
  RunConfig two = fwd;
  two.model.num_layers = 8;
  CHECK(make_plan(two, 1).category_peaks[size_t(Category::activations)] ==
        make_plan(fwd, 1).category_peaks[size_t(Category::activations)]);
  // ... whatever the policy: none's elementwise tensors (kept for a backward) are temporaries here too, measured
  for (const char* policy : {"checkpointing.policy=none", "checkpointing.policy=full"}) {
    RunConfig other = run_config(model, {policy}, 4, 4);
    other.bench.phase = "forward";
    INFO(policy);
    CHECK(measure(other, 2).peak_total == measure(fwd, 2).peak_total);
    CHECK(make_plan(other, 1).peak_bytes == make_plan(fwd, 1).peak_bytes);
  }
}

TEST_CASE("planner: the plan lists a block's saved tensors, what a stored and a recomputed block keep", "[planner]") {
  // tiny's dims (d 64, d_ff 172, 4 heads, T 64) at microbatch 2, naive attention on the cpu: the shapes by hand
  const int64_t N = 2 * 64, D = 64, F = 172, H = 4, T = 64;
  RunConfig cfg = run_config({"model.preset=tiny"}, {"checkpointing.policy=full", "checkpointing.keep_attention=true"},
                             2, 2);
  const Plan p = make_plan(cfg, 1);
  std::map<std::string, const SavedTensorRow*> by;
  for (const SavedTensorRow& r : p.block_store) by[r.name] = &r;
  REQUIRE(by.size() == 12);
  CHECK(by["qkv"]->bytes == size_t(N * 3 * D * 4));
  CHECK(by["ab"]->bytes == size_t(N * 2 * F * 4));
  CHECK(by["probs"]->bytes == size_t(2 * H * T * T * 4));
  CHECK(by["lse"]->bytes == size_t(2 * H * T * 4));
  CHECK((by["g"]->kind == "elementwise" && !by["g"]->stored));  // recomputed from ab in the backward (not none)
  CHECK((by["qkv"]->stored && !by["qkv"]->checkpointed));
  for (const char* kept_aside : {"x_in", "attn_out", "lse", "probs"}) CHECK(by[kept_aside]->checkpointed);
  const nlohmann::json j = p.to_json()["memory"]["block_store"];
  REQUIRE(j.size() == 12);
  CHECK(j[0]["name"] == "x_in");
  CHECK(j[0]["shape"] == nlohmann::json({N, D}));
  // policy none keeps the elementwise outputs too; without keep_attention a recomputed block keeps its input only
  cfg = run_config({"model.preset=tiny"}, {"checkpointing.policy=none"}, 2, 2);
  for (const SavedTensorRow& r : make_plan(cfg, 1).block_store) {
    INFO(r.name);
    CHECK(r.stored);
    CHECK(r.checkpointed == (r.name == "x_in"));
  }
}

TEST_CASE("fsdp buffers: size classes and counts worked out by hand; a gather never overwrites one in use",
          "[planner][fsdp]") {
  // embedding 10, three blocks of 4, head 12 (padded elements); the training microbatch's uses (residency.h) and the
  // forward-only ones
  const std::vector<int64_t> padded = {10, 4, 4, 4, 12};
  const std::vector<UnitUse> train = {{0, UnitPass::forward},  {1, UnitPass::forward},
                                      {2, UnitPass::forward},  {3, UnitPass::forward},
                                      {4, UnitPass::forward_backward}, {3, UnitPass::backward},
                                      {2, UnitPass::backward}, {1, UnitPass::backward},
                                      {0, UnitPass::backward, false}};
  const std::vector<UnitUse> forward = {
      {0, UnitPass::forward}, {1, UnitPass::forward}, {2, UnitPass::forward}, {3, UnitPass::forward},
      {4, UnitPass::forward}};
  // prefetch 2 (3 gathers ahead): gathers e b b b h b b b; any 3 in a row hold at most 3 blocks and 1 of e / h.
  // Bytes (2-byte gathers, f32 staging): split 4: 3 x 4 x 2 + 12 x 2 + (2 x 4 + 12) x 4 = 128; one class (split 12):
  // 3 x 12 x 2 + 2 x 12 x 4 = 168; split 10: 3 x 10 x 2 + 12 x 2 + (2 x 10 + 12) x 4 = 212.
  FsdpBuffers b = plan_fsdp_buffers(padded, {train, forward}, 2, 2);
  CHECK(b.split == 4);
  CHECK(b.largest == 12);
  CHECK(b.distance == 3);
  CHECK((b.gathers[0] == 3 && b.gathers[1] == 1));
  CHECK((b.staging[0] == 2 && b.staging[1] == 1));  // blocks' backwards follow each other; the head's and e's do not
  CHECK(b.bytes(2) == 128);
  CHECK(fsdp_gather_slots(b, padded, train) == std::vector<int>{0, 0, 1, 2, 0, 0, 1, 2});
  CHECK(fsdp_gather_slots(b, padded, forward) == std::vector<int>{0, 0, 1, 2, 0});
  // prefetch 0: one gather of each class: split 4: 4 x 2 + 12 x 2 + 80 = 112 against one class's 24 + 96 = 120
  b = plan_fsdp_buffers(padded, {train, forward}, 0, 2);
  CHECK((b.split == 4 && b.distance == 1 && b.gathers[0] == 1 && b.gathers[1] == 1 && b.bytes(2) == 112));
  // prefetch past the 8 gathers: 8 ahead, and the one window of all 8 holds 6 blocks, e and h
  b = plan_fsdp_buffers(padded, {train, forward}, 100, 2);
  CHECK((b.distance == 8 && b.gathers[0] == 6 && b.gathers[1] == 2));
  // every unit one size: one class, the tie going to it
  b = plan_fsdp_buffers({4, 4, 4, 4, 4}, {train, forward}, 2, 2);
  CHECK((b.split == 4 && b.gathers[0] == 3 && b.gathers[1] == 0 && b.staging[0] == 2 && b.staging[1] == 0));
  // a schedule the buffers were not planned for: two large gathers in a row with one large buffer, 3 ahead
  b = plan_fsdp_buffers(padded, {train, forward}, 2, 2);
  const std::vector<UnitUse> odd = {{0, UnitPass::forward}, {4, UnitPass::forward}, {1, UnitPass::forward}};
  CHECK_THROWS_WITH(fsdp_gather_slots(b, padded, odd), Catch::Contains("would overwrite gather 0 still in use"));
  // planned for a forward alone: no staging buffer for the training microbatch's gradients
  b = plan_fsdp_buffers(padded, {forward}, 2, 2);
  CHECK((b.staging[0] == 0 && b.staging[1] == 0));
  CHECK_THROWS_WITH(fsdp_gather_slots(b, padded, train), Catch::Contains("has no staging buffer of its size class"));
}
