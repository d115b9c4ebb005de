// Activation checkpointing policies and the fused, chunked LM head (issue 15) on the CPU backend (fp32 reference).
//
// Recomputation must change no number: every policy runs the same kernels on the same inputs, so losses, gradients and
// the parameters after AdamW steps are compared BITWISE with policy none. The chunked head sums the head's weight
// gradient chunk by chunk (a different summation order than one GEMM over all tokens), so it is compared with a
// tolerance. The schedule the model hands to the residency must be exactly the uses it then makes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "backend/backend.h"
#include "jobs/train_step.h"
#include "model/model.h"
#include "parallel/strategy.h"
#include "test_helpers.h"

using namespace trainer;

namespace {

struct PolicyCase {
  std::string name;
  std::string policy;
  int k = 2;
  std::optional<std::vector<int>> blocks;
  int head_chunk = 0;
  bool keep_attention = false;  // checkpointing.keep_attention
  bool in_backward = false;     // optimizer.in_backward (then no flat gradients to compare)
  bool in_gemm = false;         // optimizer.in_gemm (with in_backward)
  int in_gemm_min_elements = 0;  // optimizer.in_gemm_min_elements (0: every matrix)
};

struct Run {
  std::vector<double> losses, grad_norms;
  std::vector<float> grads, params;
  size_t peak_activations = 0, peak_total = 0, peak_gradients = 0;
  int fused_updates = 0;  // Backend::matmul_dw_adamw calls (the cpu's default opens its range)
};

/// Counts the ranges of one name.
struct RangeCounter : RangeSink {
  std::string name;
  int count = 0;
  explicit RangeCounter(std::string n) : name(std::move(n)) {}
  void push(const char* n, const char*, int) override { count += name == n; }
  void pop() override {}
};

constexpr int kLayers = 6, kRows = 4, kT = 16, kVocab = 97;

ModelDims tiny6() { return ModelDims{kVocab, kT, 64, 172, kLayers, 4, 10000.0}; }

/// `steps` AdamW steps of the tiny 6-block model (fp32, naive attention) through the train job's own step function.
Run run(const PolicyCase& pc, int micro, int steps = 3, const ModelDims& dims = tiny6()) {
  auto be = make_backend(Device::cpu, 0);
  RunConfig cfg;
  cfg.device = "cpu";
  cfg.parallel.strategy = "none";
  cfg.checkpointing.policy = pc.policy;
  cfg.checkpointing.k = pc.k;
  cfg.checkpointing.blocks = pc.blocks;
  cfg.checkpointing.lm_head_chunk_tokens = pc.head_chunk;
  cfg.checkpointing.keep_attention = pc.keep_attention;
  cfg.optimizer.in_backward = pc.in_backward;
  cfg.optimizer.in_gemm = pc.in_gemm;
  cfg.optimizer.in_gemm_min_elements = pc.in_gemm_min_elements;
  auto strategy = make_strategy(cfg, *be, nullptr);
  Model m(*be, dims, DType::f32, AttnImpl::naive, ParamLayout::kAlign,
          ParamStorage(true, strategy->full_grads(), DType::f32), ActivationPolicy::from(cfg.checkpointing));
  m.init_random(3);
  strategy->attach(m);
  m.reserve(micro, kT);
  StepShape s;
  s.n_micro = kRows / micro;
  s.micro = micro;
  s.seq_len = kT;
  s.global_tokens = int64_t(kRows) * kT;
  std::vector<int32_t> in(size_t(kRows) * kT), tg(in.size());
  Run out;
  RangeCounter fused("matmul_dw_adamw (product, adamw)");
  be->set_range_sink(&fused);
  be->memory().reset_peak();
  for (int step = 0; step < steps; ++step) {
    for (size_t i = 0; i < in.size(); ++i) {
      in[i] = int32_t((i * 7 + 3 + size_t(step) * 11) % kVocab);
      tg[i] = int32_t((i * 5 + 1 + size_t(step) * 13) % kVocab);
    }
    m.begin_step_losses(int64_t(in.size()));
    m.set_step_tokens(in.data(), tg.data());
    out.grad_norms.push_back(train_step(*be, m, *strategy, s, 1e-2, std::nullopt));
    out.losses.push_back(m.step_loss_sum());
  }
  const Tensor p = m.params();
  if (m.has_full_grads()) out.grads.assign(m.grads().ptr<float>(), m.grads().ptr<float>() + m.grads().numel());
  out.params.assign(p.ptr<float>(), p.ptr<float>() + p.numel());
  out.peak_activations = be->memory().peak[int(Category::activations)];
  out.peak_gradients = be->memory().peak[int(Category::gradients)];
  out.peak_total = be->memory().peak_total;
  out.fused_updates = fused.count;
  be->set_range_sink(nullptr);
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

const std::vector<PolicyCase>& policy_cases() {
  static const std::vector<PolicyCase> cases = {
      {"selective", "selective"},
      {"full", "full"},
      {"every_k k=1", "every_k", 1},
      {"every_k k=2", "every_k", 2},
      {"every_k k=3", "every_k", 3},
      {"every_k k=4 (uneven last segment)", "every_k", 4},
      {"sqrt", "sqrt"},
      {"nested", "nested"},
      {"selective, blocks 1 2 4", "selective", 2, std::vector<int>{1, 2, 4}},
      {"every_k k=2, blocks 0-3", "every_k", 2, std::vector<int>{0, 1, 2, 3}},
      {"nested, blocks 0-4 (last block stored)", "nested", 2, std::vector<int>{0, 1, 2, 3, 4}},
      {"none, blocks 5", "none", 2, std::vector<int>{5}},
      {"full, keep_attention", "full", 2, std::nullopt, 0, true},
      {"every_k k=3, keep_attention", "every_k", 3, std::nullopt, 0, true},
      {"nested, keep_attention", "nested", 2, std::nullopt, 0, true},
      {"selective, blocks 0 3, keep_attention", "selective", 2, std::vector<int>{0, 3}, 0, true},
      {"selective, optimizer in_backward", "selective", 2, std::nullopt, 0, false, true},
      {"full, keep_attention, optimizer in_backward", "full", 2, std::nullopt, 0, true, true},
      // the blocks' matrices updated inside their products (Backend::matmul_dw_adamw; the CPU runs the product into
      // a temporary and adamw over the matrix: the same numbers), the gains by runs of step_range
      {"none, optimizer in_backward + in_gemm", "none", 2, std::nullopt, 0, false, true, true},
      {"selective, optimizer in_backward + in_gemm", "selective", 2, std::nullopt, 0, false, true, true},
      {"full, keep_attention, optimizer in_backward + in_gemm", "full", 2, std::nullopt, 0, true, true, true},
  };
  return cases;
}

}  // namespace

TEST_CASE("checkpointing: every policy gives bitwise the losses, gradients and parameters of none", "[checkpointing]") {
  for (int micro : {4, 2}) {
    const Run ref = run({"none", "none"}, micro);
    for (const PolicyCase& pc : policy_cases()) {
      INFO("policy " << pc.name << ", microbatch " << micro);
      const Run r = run(pc, micro);
      CHECK(r.losses == ref.losses);
      if (!pc.in_backward) CHECK(bitwise_equal(r.grads, ref.grads));  // in_backward frees each after its update
      CHECK(bitwise_equal(r.params, ref.params));
      // the norm: the same squares, summed per update (per unit, or per matrix and run of gains) in another order
      REQUIRE(r.grad_norms.size() == ref.grad_norms.size());
      for (size_t i = 0; i < r.grad_norms.size(); ++i)
        CHECK(std::abs(r.grad_norms[i] - ref.grad_norms[i]) <= 1e-12 * ref.grad_norms[i]);
    }
  }
}

TEST_CASE("checkpointing: a model with d_ff < d_model (the recomputed h1 / h2 fill more than the g scratch)",
          "[checkpointing]") {
  // The backward recomputes h2 and h1 [N, D] into the dg scratch once g [N, F] is consumed (so that dh can receive dh2
  // and dh1 before the fused weight updates): with F < D that scratch must hold N x D too.
  const ModelDims narrow{kVocab, kT, 64, 24, kLayers, 4, 10000.0};
  const Run ref = run({"none", "none"}, 4, 3, narrow);
  for (const PolicyCase& pc : {PolicyCase{"selective", "selective"}, PolicyCase{"full", "full"},
                               PolicyCase{"selective, in_gemm", "selective", 2, std::nullopt, 0, false, true, true}}) {
    INFO("policy " << pc.name);
    const Run r = run(pc, 4, 3, narrow);
    CHECK(r.losses == ref.losses);
    CHECK(bitwise_equal(r.params, ref.params));
  }
}

TEST_CASE("optimizer.in_gemm: each block matrix is updated in its product once a step, on the last microbatch",
          "[checkpointing]") {
  // 4 products a block (Wqkv, Wo, [W1; W3], W2), 6 blocks, and the LM head's: 3 steps, whatever the number of
  // microbatches; the values equal in_backward's (the first test case), with one microbatch and with 2 (the earlier
  // one's sum in g_buf)
  for (int micro : {4, 2, 1}) {
    INFO("microbatch " << micro);
    CHECK(run({"in_gemm", "selective", 2, std::nullopt, 0, false, true, true}, micro).fused_updates ==
          (4 * kLayers + 1) * 3);
    CHECK(run({"in_backward", "selective", 2, std::nullopt, 0, false, true}, micro).fused_updates == 0);
  }
}

TEST_CASE("optimizer.in_gemm_min_elements: only products of at least that many elements are fused", "[checkpointing]") {
  // tiny6's products: Wqkv 3 x 64 x 64 = 12288, [W1; W3] 2 x 172 x 64 = 22016, W2 64 x 172 = 11008, Wo 64 x 64 = 4096,
  // the head 97 x 64 = 6208. At 11008 the first three are fused in each of the 6 blocks (k, v and w3 with the product
  // that holds them), Wo and the head take the product, then adamw; at 22017 none is (in_backward's step). The values
  // equal in_backward's, with one microbatch (Wo's gradient then has a slot in the block's compact buffer) and two.
  for (int micro : {4, 2}) {
    INFO("microbatch " << micro);
    const Run ref = run({"in_backward", "selective", 2, std::nullopt, 0, false, true}, micro);
    for (const auto& [min, fused] : {std::pair(4096, 4 * kLayers + 1), std::pair(6208, 3 * kLayers + 1),
                                     std::pair(11008, 3 * kLayers), std::pair(11009, 2 * kLayers),
                                     std::pair(22016, kLayers), std::pair(22017, 0)}) {
      INFO("in_gemm_min_elements " << min);
      const Run r = run({"in_gemm", "selective", 2, std::nullopt, 0, false, true, true, min}, micro);
      CHECK(r.fused_updates == fused * 3);
      CHECK(r.losses == ref.losses);
      CHECK(bitwise_equal(r.params, ref.params));
      REQUIRE(r.grad_norms.size() == ref.grad_norms.size());
      for (size_t i = 0; i < r.grad_norms.size(); ++i)
        CHECK(std::abs(r.grad_norms[i] - ref.grad_norms[i]) <= 1e-12 * ref.grad_norms[i]);
    }
  }
}

TEST_CASE("optimizer.in_gemm: the blocks' gradients hold only their gains, so the peak does not rise", "[checkpointing]") {
  // The cpu runs each fused matrix's product into a one-matrix temporary (Backend::matmul_dw_adamw's default): that
  // temporary replaces the block's whole gradient buffer, which now holds only the RMSNorm gains (UnitView::grad_runs).
  const Run plain = run({"in_backward", "none", 2, std::nullopt, 0, false, true}, 4, 1);
  const Run fused = run({"in_gemm", "none", 2, std::nullopt, 0, false, true, true}, 4, 1);
  const int64_t D = tiny6().d_model, F = tiny6().d_ff;
  const size_t block_grads = size_t(4 * D * D + 3 * D * F + 2 * D) * 4;  // f32 (plus alignment padding)
  INFO("gradients peak: in_backward " << plain.peak_gradients << ", in_gemm " << fused.peak_gradients);
  CHECK(fused.peak_gradients < plain.peak_gradients);
  CHECK(plain.peak_gradients >= block_grads);
  CHECK(fused.peak_total <= plain.peak_total);
}

TEST_CASE("checkpointing: recomputation lowers the activation peak in the expected order", "[checkpointing]") {
  const size_t none = run({"none", "none"}, 4, 1).peak_activations;
  const size_t selective = run({"selective", "selective"}, 4, 1).peak_activations;
  const size_t every3 = run({"k3", "every_k", 3}, 4, 1).peak_activations;
  const size_t full = run({"full", "full"}, 4, 1).peak_activations;
  const size_t nested = run({"nested", "nested"}, 4, 1).peak_activations;
  CHECK(selective < none);
  CHECK(every3 < selective);
  CHECK(full < every3);
  CHECK(nested < selective);
  // full keeps 6 block inputs plus one block's store: far below 6 stores (none keeps elementwise results too)
  CHECK(double(full) < 0.5 * double(selective));
}

TEST_CASE("checkpointing: policies group blocks into the documented segments", "[checkpointing]") {
  using K = Segment::Kind;
  auto segs = [](const std::string& policy, int k, std::optional<std::vector<int>> blocks, int L) {
    ActivationPolicy p;
    p.policy = policy;
    p.k = k;
    p.blocks = std::move(blocks);
    std::vector<std::tuple<int, int, K>> out;
    for (const Segment& s : p.segments(L)) out.emplace_back(s.begin, s.end, s.kind);
    return out;
  };
  using V = std::vector<std::tuple<int, int, K>>;
  CHECK(segs("none", 2, {}, 3) == V{{0, 1, K::stored}, {1, 2, K::stored}, {2, 3, K::stored}});
  CHECK(segs("full", 2, {}, 2) == V{{0, 1, K::flat}, {1, 2, K::flat}});
  CHECK(segs("every_k", 3, {}, 7) == V{{0, 3, K::flat}, {3, 6, K::flat}, {6, 7, K::flat}});
  CHECK(segs("sqrt", 1, {}, 32) == V{{0, 6, K::flat}, {6, 12, K::flat}, {12, 18, K::flat}, {18, 24, K::flat},
                                     {24, 30, K::flat}, {30, 32, K::flat}});
  CHECK(segs("nested", 2, {}, 5) == V{{0, 5, K::nested}});
  CHECK(segs("every_k", 2, std::vector<int>{0, 1, 2, 4}, 6) ==
        V{{0, 2, K::flat}, {2, 3, K::flat}, {3, 4, K::stored}, {4, 5, K::flat}, {5, 6, K::stored}});
  CHECK(segs("selective", 2, std::vector<int>{1}, 3) == V{{0, 1, K::stored}, {1, 2, K::flat}, {2, 3, K::stored}});
}

namespace {
/// A residency that serves the model's full buffers and checks every use against the announced schedule.
class CheckingResidency final : public ParamResidency {
 public:
  explicit CheckingResidency(Model& m) : m_(m) {}
  void begin_schedule(const std::vector<UnitUse>& uses) override {
    CHECK(next_ == uses_.size());  // the previous microbatch used everything it announced
    uses_ = uses;
    next_ = 0;
  }
  UnitView acquire(int unit, UnitPass pass) override {
    REQUIRE(next_ < uses_.size());
    CHECK(uses_[next_].unit == unit);
    CHECK(uses_[next_].pass == pass);
    if (pass == UnitPass::recompute) ++recomputes_;
    return m_.full_view(unit, pass);
  }
  void release(int unit, UnitPass pass) override {
    CHECK(uses_[next_].unit == unit);
    ++next_;
    m_.full_release(unit, pass);
  }
  size_t recomputes_ = 0;

 private:
  Model& m_;
  std::vector<UnitUse> uses_;
  size_t next_ = 0;
};
}  // namespace

TEST_CASE("checkpointing: the announced unit schedule is exactly the uses made", "[checkpointing]") {
  struct Expect {
    PolicyCase pc;
    size_t recomputes;
  };
  // full: each block once; every_k 4 on 6: 6; nested on 6 blocks: forward to the midpoints of [0,3) and [3,6) is
  // kept from the forward for the spine (3, 4 / 5), so it recomputes 0..2 -> {0: 1 to reach 1, ...}: counted here by
  // the closed form of the recursion below.
  std::function<size_t(int, int, bool)> nested = [&](int a, int b, bool spine) -> size_t {
    if (b - a == 1) return 1;
    const int m = (a + b) / 2;
    return size_t(spine ? 0 : m - a) + nested(m, b, spine) + nested(a, m, false);
  };
  const std::vector<Expect> cases = {
      {{"none", "none"}, 0},  {{"selective", "selective"}, 0},    {{"full", "full"}, 6},
      {{"k4", "every_k", 4}, 6}, {{"nested", "nested"}, nested(0, 6, true)},
  };
  for (const Expect& e : cases) {
    INFO(e.pc.name);
    auto be = make_backend(Device::cpu, 0);
    RunConfig cfg;
    cfg.checkpointing.policy = e.pc.policy;
    cfg.checkpointing.k = e.pc.k;
    Model m(*be, tiny6(), DType::f32, AttnImpl::naive, ParamLayout::kAlign, true,
            ActivationPolicy::from(cfg.checkpointing));
    m.init_random(1);
    CheckingResidency res(m);
    m.set_residency(&res);
    std::vector<int32_t> in(size_t(kRows) * kT, 5), tg(in.size(), 7);
    m.zero_grads();
    m.begin_step_losses(int64_t(in.size()));
    m.forward(in.data(), tg.data(), kRows, kT, true, 1.f / float(in.size()), 0);
    m.backward();
    CHECK(res.recomputes_ == e.recomputes);
    const auto uses = m.unit_schedule(true);
    CHECK(uses.front().unit == 0);
    CHECK(uses.back().unit == 0);
    CHECK_FALSE(uses.back().weights);  // the embedding's backward reads no weights
  }
}

TEST_CASE("lm head: chunked logits + loss match the unchunked head", "[checkpointing][head]") {
  // 64 tokens in chunks of 64 (one chunk), 16, 10 (a ragged last chunk) and 1.
  const Run one = run({"one chunk", "selective", 2, {}, 64}, 4);
  for (int chunk : {16, 10, 1}) {
    INFO("chunk " << chunk);
    const Run r = run({"chunked", "selective", 2, {}, chunk}, 4);
    // Per-token losses come from the same row products: equal to rounding of the row-chunked GEMM.
    CHECK(testing::max_rel_error(r.losses, one.losses) < 1e-6);
    // The head's weight gradient sums over tokens chunk by chunk: a different fp32 summation order.
    CHECK(testing::all_close(r.grads, one.grads, 1e-6, 1e-4) == "");
    // Parameters after 3 AdamW steps norm-wise: AdamW divides each gradient element by its own magnitude, so an
    // element whose gradient is at rounding level moves by O(lr) either way (as in test_model's accumulation test).
    double diff2 = 0, ref2 = 0;
    for (size_t i = 0; i < one.params.size(); ++i) {
      diff2 += double(r.params[i] - one.params[i]) * double(r.params[i] - one.params[i]);
      ref2 += double(one.params[i]) * double(one.params[i]);
    }
    CHECK(std::sqrt(diff2 / ref2) < 1e-5);
  }
}

TEST_CASE("optimizer.in_gemm: the chunked head's matrix is updated in its last chunk's product", "[checkpointing][head]") {
  // chunks of 16 and 10 (ragged) tokens: the earlier chunks sum the head's dW into its gradient, the last chunk's
  // product adds to that (g_buf) and updates; bitwise in_backward's with the same chunks (the same products, summed
  // in the same order), at one and two microbatches, and the head's update counted once a step
  for (int micro : {4, 2})
    for (int chunk : {16, 10}) {
      INFO("microbatch " << micro << ", chunk " << chunk);
      const Run plain = run({"in_backward", "selective", 2, {}, chunk, false, true}, micro);
      const Run fused = run({"in_gemm", "selective", 2, {}, chunk, false, true, true}, micro);
      CHECK(fused.losses == plain.losses);
      CHECK(bitwise_equal(fused.params, plain.params));
      CHECK(fused.fused_updates == (4 * kLayers + 1) * 3);
      // the norm: the same squares, summed per update in another order
      REQUIRE(fused.grad_norms.size() == plain.grad_norms.size());
      for (size_t i = 0; i < plain.grad_norms.size(); ++i)
        CHECK(std::abs(fused.grad_norms[i] - plain.grad_norms[i]) <= 1e-12 * plain.grad_norms[i]);
    }
}

TEST_CASE("lm head: the auto chunk keeps the head's buffers within 1 GiB", "[checkpointing][head]") {
  // 8B shape: 32768 tokens x vocab 151936, d_model 4096, bf16 -> 3328-token chunks: (151936 + 2 x 4096) x 2 bytes
  // per row = 1,065.8 MB (0.993 GiB); 3456 rows would be 1.03 GiB
  CHECK(lm_head_chunk_rows(32768, 151936, 4096, DType::bf16, 0) == 3328);
  const int64_t per_row = (151936 + 2 * 4096) * 2 + 4;
  CHECK(3328 * per_row <= (int64_t(1) << 30));
  CHECK((3328 + 128) * per_row > (int64_t(1) << 30));
  CHECK(lm_head_chunk_rows(2048, 10000, 2560, DType::bf16, 0) == 2048);  // xl ctx 512 batch 4: one chunk
  CHECK(lm_head_chunk_rows(100, 10000, 2560, DType::f32, 7) == 7);
  CHECK(lm_head_chunk_rows(5, 10000, 2560, DType::f32, 7) == 5);
  CHECK(lm_head_chunk_rows(1 << 20, 1 << 24, 4096, DType::f32, 0) == 128);  // at least 128 rows
}
