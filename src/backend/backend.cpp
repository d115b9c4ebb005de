#include "backend/backend.h"

#include <cmath>

#include "backend/bf16.h"
#include "backend/cpu/cpu_backend.h"
#ifdef TRAINER_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace trainer {

Buffer::Buffer(Backend* be, size_t bytes, Category cat) : be_(be), bytes_(bytes), cat_(cat) {
  if (bytes == 0) return;
  data_ = be->raw_alloc(bytes);
  if (!data_) {
    be->memory().on_alloc_failed(cat, bytes);
    throw OutOfMemory(fmt::format("out of memory on {}: asked for {} ({}) with {} in use ({})", be->name(),
                                  format_bytes(bytes), category_name(cat), format_bytes(be->memory().total),
                                  be->memory().describe_current()));
  }
  id_ = be->memory().on_alloc(cat, bytes);
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (data_) {
    be_->raw_free(data_);
    be_->memory().on_free(cat_, bytes_, id_);
  }
  data_ = nullptr;
  bytes_ = 0;
  id_ = 0;
}

void Buffer::swap(Buffer& o) noexcept {
  std::swap(be_, o.be_);
  std::swap(data_, o.data_);
  std::swap(bytes_, o.bytes_);
  std::swap(id_, o.id_);
  std::swap(cat_, o.cat_);
}

Tensor Buffer::view(DType t, std::initializer_list<int64_t> shape) const {
  Tensor v(data_, t, be_ ? be_->device() : Device::cpu, shape);
  TRAINER_CHECK(v.bytes() <= bytes_, "Buffer::view: {} bytes asked of a {}-byte buffer", v.bytes(), bytes_);
  return v;
}

AdamWStepValues adamw_step_values(const AdamWArgs& a) {
  const double t = double(a.t);
  AdamWStepValues v;
  v.decay = float(a.lr * a.weight_decay);
  v.step_size = float(a.lr * std::sqrt(1.0 - std::pow(a.beta2, t)) / (1.0 - std::pow(a.beta1, t)));
  v.rounding_key = bf16_bits::rounding_key(a.seed, a.t);
  return v;
}

void Backend::matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                              const AdamWArgs& a, Tensor g_buf, bool accumulate) {
  const int64_t M = dY.cols(), N = X.cols();
  TRAINER_CHECK(dY.rows() == X.rows() && p.numel() == M * N, "matmul_dw_adamw: dY {} and X {} for a weight of {}",
                dY.shape_str(), X.shape_str(), p.numel());
  TRAINER_CHECK(!a.grad_sumsq || a.sumsq_to, "matmul_dw_adamw: the sum of g^2 needs a.sumsq_to (nothing returns it)");
  TRAINER_CHECK(!g_buf.data || (g_buf.numel() == M * N && g_buf.dtype == p.dtype),
                "matmul_dw_adamw: g_buf {} {} for a {} weight of {} elements", dtype_name(g_buf.dtype),
                g_buf.shape_str(), dtype_name(p.dtype), M * N);
  TRAINER_CHECK(g_buf.data || !accumulate, "matmul_dw_adamw: accumulate without the sum (g_buf)");
  ScopedRange r(*this, "matmul_dw_adamw (product, adamw)");
  if (g_buf.data) {  // the gradient's slot: this product writes it, or adds to the earlier sum there
    matmul(g_buf.reshape({M, N}), dY, true, X, false, 1.f, accumulate ? 1.f : 0.f);
    adamw(p, g_buf.reshape({M * N}), m, v, p_work, a);
    return;
  }
  Buffer g = alloc(size_t(M * N) * dtype_size(p.dtype), Category::gradients);
  matmul(g.view(p.dtype, {M, N}), dY, true, X, false, 1.f, 0.f);
  adamw(p, g.view(p.dtype, {M * N}), m, v, p_work, a);
}

std::unique_ptr<Graph> Backend::capture(const std::function<void()>&) {
  throw RuntimeError(fmt::format("{}: no graph capture (CUDA graphs need the cuda backend)", name()));
}

Fp32Matmul parse_fp32_matmul(const std::string& name) {
  if (name == "ieee") return Fp32Matmul::ieee;
  if (name == "tf32") return Fp32Matmul::tf32;
  TRAINER_CHECK(name == "3xtf32", "fp32_matmul '{}' is not ieee, tf32 or 3xtf32", name);
  return Fp32Matmul::split3;
}

std::vector<float> download_f32(Backend& be, const Tensor& t) {
  TRAINER_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, "download_f32: a {} tensor (fp32 or bf16 expected)",
                dtype_name(t.dtype));
  std::vector<float> host(size_t(t.numel()));
  if (t.dtype == DType::f32) {
    be.copy_to_host(host.data(), t.data, host.size() * 4);
    return host;
  }
  std::vector<uint16_t> h(host.size());
  be.copy_to_host(h.data(), t.data, h.size() * 2);
  for (size_t i = 0; i < h.size(); ++i) host[i] = bf16_bits::to_f32(h[i]);
  return host;
}

std::unique_ptr<Backend> make_backend(Device device, int device_index, const BackendOptions& opts) {
  if (device == Device::cpu) {
    auto be = std::make_unique<CpuBackend>();  // allocates nothing before this
    be->memory().timeline = opts.memory_timeline;
    return be;
  }
#ifdef TRAINER_HAVE_CUDA
  CONFIG_CHECK(cuda_available(), "device: 'cuda' was asked for but no CUDA device is visible");
  return make_cuda_backend(device_index, opts);
#else
  throw ConfigError(
      "device: 'cuda' was asked for but this trainer was built without CUDA (no nvcc at build time, or "
      "-DTRAINER_CUDA=OFF)");
#endif
}

#ifndef TRAINER_HAVE_CUDA
bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_name(int) { return ""; }
#endif

}  // namespace trainer
