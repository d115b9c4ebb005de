// CudaBackend: memory, streams, events and every op but attention (attention.cpp). Each op checks shapes and dtypes
// first (TRAINER_CHECK: a mismatch is a bug in the caller), then enqueues its launcher from kernels/ on the compute
// stream. Formulas and sources are in each kernel file's header comment.
#include "backend/cuda/cuda_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "adamw.cuh"
#include "backend/bf16.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "cross_entropy.cuh"
#include "dw_adamw/dw_adamw.h"
#include "elementwise.cuh"
#include "backend/cuda_sizes.h"
#include "embedding.cuh"
#include "reductions.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "swiglu.cuh"

namespace trainer {
namespace {

constexpr size_t kWorkspaceBytes = cuda_sizes::kCublasWorkspaceBytes;  // backend/cuda_sizes.h (the planner mirrors it)

struct CudaEvent final : Event {
  cudaEvent_t e = nullptr;
  CudaEvent() { CUDA_CHECK(cudaEventCreate(&e)); }
  void* native_handle() override { return e; }
  ~CudaEvent() override { cudaEventDestroy(e); }
};

bool present(const Tensor& t) { return t.data != nullptr; }
bool is_float(DType t) { return t == DType::f32 || t == DType::bf16; }

void check_cuda(const Tensor& t, const char* op, const char* what) {
  TRAINER_CHECK(t.data != nullptr, "{}: {} is empty", op, what);
  TRAINER_CHECK(t.device == Device::cuda, "{}: {} is not on the GPU", op, what);
}
void check_float(const Tensor& t, const char* op, const char* what) {
  check_cuda(t, op, what);
  TRAINER_CHECK(is_float(t.dtype), "{}: {} has dtype {}, not f32 or bf16", op, what, dtype_name(t.dtype));
}

}  // namespace

// ---- construction, memory -------------------------------------------------------------------------------------------

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the sticky-free error and say none
    return 0;
  }
  return n;
}

bool cuda_available() { return cuda_device_count() > 0; }

std::string cuda_device_name(int local_rank) {
  const int count = cuda_device_count();
  cudaDeviceProp prop{};
  if (local_rank < 0 || count == 0 || cudaGetDeviceProperties(&prop, local_rank % count) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return prop.name;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index, const BackendOptions& opts) {
  return std::make_unique<CudaBackend>(device_index, opts);
}

CudaBackend::CudaBackend(int local_rank, const BackendOptions& opts) : opts_(opts) {
  stats_.timeline = opts.memory_timeline;  // before the first allocation (the workspace below)
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CONFIG_CHECK(local_rank >= 0 && count > 0, "device: no GPU for local rank {} ({} visible)", local_rank, count);
  // One GPU per local rank; with more ranks than GPUs on a host (comm "mpi"), ranks share GPUs round-robin.
  const int device_index = local_rank % count;
  device_ = device_index;
  CUDA_CHECK(cudaSetDevice(device_index));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
  gpu_name_ = prop.name;
  gpu_bytes_ = prop.totalGlobalMem;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime_version_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CachingAllocator::Source src;
  src.alloc = [](size_t bytes) -> void* {
    void* p = nullptr;
    const cudaError_t st = cudaMalloc(&p, bytes);
    if (st == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: the allocator empties its cache and retries, or reports nullptr
      return nullptr;
    }
    CUDA_CHECK(st);
    return p;
  };
  src.free = [](void* p) { CUDA_CHECK(cudaFree(p)); };
  // Every stream, not only the compute stream: cudaFree waits for the device anyway, and a communicator's stream
  // must not be reading a block that goes back.
  src.sync = [] { CUDA_CHECK(cudaDeviceSynchronize()); };
  pool_ = std::make_unique<CachingAllocator>(std::move(src));
  workspace_ = alloc(kWorkspaceBytes, Category::workspace);
  reduce_partials_ = alloc(cuda_sizes::reduce_partials_bytes(), Category::workspace);
  CUDA_CHECK(cudaMallocHost(&host_result_, sizeof(double)));
  blas_ = std::make_unique<CublasLtMatmul>(workspace_.data(), workspace_.bytes(), opts_.gemm_autotune);
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  blas_.reset();
  workspace_.reset();
  scratch_.reset();
  split_.reset();
  reduce_partials_.reset();
  rope_table_.reset();
  pool_.reset();  // the cached blocks go back to the driver (the stream is idle: synchronised above)
  if (host_result_) cudaFreeHost(host_result_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return fmt::format("cuda:{}", device_); }

std::string CudaBackend::description() const {
  return fmt::format("{}, {:.1f} GiB, CUDA {}.{}", gpu_name_, double(gpu_bytes_) / double(1ull << 30),
                     runtime_version_ / 1000, (runtime_version_ % 1000) / 10);
}

void* CudaBackend::raw_alloc(size_t bytes) { return pool_->allocate(bytes); }

void CudaBackend::raw_free(void* p) { pool_->deallocate(p); }

void CudaBackend::copy_from_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::fill(Tensor t, float value) {
  ScopedRange r(*this, "fill");
  check_cuda(t, "fill", "t");
  TRAINER_CHECK(is_float(t.dtype) || t.dtype == DType::i32, "fill: dtype {} is not f32, bf16 or i32",
                dtype_name(t.dtype));
  kernels::fill(t.data, t.dtype, t.numel(), value, stream_);
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void* CudaBackend::grown(Buffer& b, size_t bytes) {
  if (bytes <= b.bytes()) return b.data();
  const size_t want = cuda_sizes::scratch_grown(b.bytes(), bytes);  // whole MiB, at least 1.5x
  // A captured graph writes the old block on every replay: it must not move while one exists (or is being made).
  TRAINER_CHECK(live_graphs_ == 0,
                "a workspace must grow from {} to {} while a CUDA graph uses it (run the step once uncaptured before "
                "capturing; set cuda_graph false for work of other shapes)",
                format_bytes(b.bytes()), format_bytes(bytes));
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // kernels already enqueued may still read the old block
  b.reset();
  b = alloc(want, Category::workspace);
  return b.data();
}

void* CudaBackend::scratch(size_t bytes) { return grown(scratch_, bytes); }

// ---- graphs ---------------------------------------------------------------------------------------------------------

namespace {
struct CudaGraph final : Graph {
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;
  CachingAllocator* pool = nullptr;
  int* live = nullptr;  // CudaBackend::live_graphs_
  size_t n_nodes = 0;
  void launch() override { CUDA_CHECK(cudaGraphLaunch(exec, stream)); }
  size_t nodes() const override { return n_nodes; }
  ~CudaGraph() override {
    if (exec) {
      cudaStreamSynchronize(stream);  // a replay still running uses the private blocks
      cudaGraphExecDestroy(exec);
    }
    pool->release_private();
    --*live;
  }
};
}  // namespace

std::unique_ptr<Graph> CudaBackend::capture(const std::function<void()>& enqueue) {
  TRAINER_CHECK(live_graphs_ == 0, "capture: a captured graph exists already (one at a time: its blocks are private)");
  // The cached blocks of the uncaptured steps go back first: the capture then takes fresh blocks in its own order
  // (no best fit that differs from step 1's and asks for more), and a run near the memory limit has the whole
  // device again. Synchronises (outside the capture).
  pool_->release_cached();
  auto g = std::make_unique<CudaGraph>();
  g->stream = stream_;
  g->pool = pool_.get();
  g->live = &live_graphs_;
  ++live_graphs_;
  cudaGraph_t graph = nullptr;
  // Relaxed: the allocator may call cudaMalloc inside the capture (the new block is private like the others).
  // Synchronising calls still fail the capture.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  pool_->begin_private();
  try {
    enqueue();
  } catch (...) {
    pool_->end_private();
    (void)cudaStreamEndCapture(stream_, &graph);  // ends the (possibly invalidated) capture; the stream is usable
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  pool_->end_private();
  const cudaError_t st = cudaStreamEndCapture(stream_, &graph);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    throw RuntimeError(fmt::format("cuda graph capture failed: {} (an op synchronised, copied from pageable host "
                                   "memory or used another stream; run with cuda_graph false)",
                                   cudaGetErrorString(st)));
  }
  const cudaError_t nodes = cudaGraphGetNodes(graph, nullptr, &g->n_nodes);
  const cudaError_t inst = nodes == cudaSuccess ? cudaGraphInstantiate(&g->exec, graph, 0) : nodes;
  cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  CUDA_CHECK(inst);
  CUDA_CHECK(cudaGraphUpload(g->exec, stream_));
  return g;
}

// ---- timing ---------------------------------------------------------------------------------------------------------

std::unique_ptr<Event> CudaBackend::make_event() { return std::make_unique<CudaEvent>(); }

void CudaBackend::record(Event& e) { CUDA_CHECK(cudaEventRecord(dynamic_cast<CudaEvent&>(e).e, stream_)); }

float CudaBackend::elapsed_ms(Event& start, Event& end) {
  auto& s = dynamic_cast<CudaEvent&>(start);
  auto& e = dynamic_cast<CudaEvent&>(end);
  CUDA_CHECK(cudaEventSynchronize(e.e));
  float ms = 0.f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, s.e, e.e));
  return ms;
}

// ---- ops ------------------------------------------------------------------------------------------------------------

void CudaBackend::gemm(const GemmShape& shape, void* C, const void* A, const void* B, float alpha, float beta,
                       const void* C_in, bool model_product) {
  GemmShape g = shape;
  const bool split = g.ab == DType::f32 && opts_.fp32_matmul == Fp32Matmul::split3 && model_product;
  g.tf32 = g.ab == DType::f32 && (opts_.fp32_matmul == Fp32Matmul::tf32 || split);
  if (!split) {
    blas_->gemm(g, C, A, B, alpha, beta, stream_, C_in);
    return;
  }
  // 3xTF32: A B ~ Al Bh + Ah Bl + Ah Bh (the small terms first; Al Bl, ~2^-22 relative, is left out), each a TF32
  // product accumulated into C in fp32. The parts keep their operand's layout, so the three share g (and its plan).
  const int64_t na = span_a(g), nb = span_b(g);
  char* base = static_cast<char*>(grown(split_, cuda_sizes::split_tf32_bytes(na, nb)));
  const size_t pa = cuda_sizes::split_tf32_bytes(na, 0) / 2, pb = cuda_sizes::split_tf32_bytes(0, nb) / 2;
  float *ah = reinterpret_cast<float*>(base), *al = reinterpret_cast<float*>(base + pa),
        *bh = reinterpret_cast<float*>(base + 2 * pa), *bl = reinterpret_cast<float*>(base + 2 * pa + pb);
  kernels::split_tf32(ah, al, static_cast<const float*>(A), na, stream_);
  kernels::split_tf32(bh, bl, static_cast<const float*>(B), nb, stream_);
  blas_->gemm(g, C, al, bh, alpha, beta, stream_, C_in);
  blas_->gemm(g, C, ah, bl, alpha, 1.f, stream_);
  blas_->gemm(g, C, ah, bh, alpha, 1.f, stream_);
}

GemmShape CudaBackend::matmul_shape(const Tensor& C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b) {
  check_float(C, "matmul", "C");
  check_float(A, "matmul", "A");
  check_float(B, "matmul", "B");
  TRAINER_CHECK(A.dtype == B.dtype, "matmul: A is {} but B is {}", dtype_name(A.dtype), dtype_name(B.dtype));
  TRAINER_CHECK(C.dtype == DType::f32 || C.dtype == A.dtype, "matmul: C is {} with {} operands", dtype_name(C.dtype),
                dtype_name(A.dtype));
  GemmShape g;
  g.M = C.rows();
  g.N = C.cols();
  g.K = trans_a ? A.rows() : A.cols();
  TRAINER_CHECK((trans_a ? A.cols() : A.rows()) == g.M, "matmul: op(A) of {} (trans {}) does not have {} rows",
                A.shape_str(), trans_a, g.M);
  TRAINER_CHECK((trans_b ? B.cols() : B.rows()) == g.K && (trans_b ? B.rows() : B.cols()) == g.N,
                "matmul: op(B) of {} (trans {}) is not [{}, {}]", B.shape_str(), trans_b, g.K, g.N);
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.ab = A.dtype;
  g.c = C.dtype;
  g.lda = A.cols();
  g.ldb = B.cols();
  g.ldc = C.cols();
  return g;
}

void CudaBackend::matmul(Tensor C, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b, float alpha,
                         float beta) {
  ScopedRange r(*this, "matmul");
  const GemmShape g = matmul_shape(C, A, trans_a, B, trans_b);
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // C = beta C
    if (beta == 0.f)
      kernels::fill(C.data, C.dtype, C.numel(), 0.f, stream_);
    else if (beta != 1.f)
      kernels::scale(C.data, C.dtype, C.numel(), beta, stream_);
    return;
  }
  gemm(g, C.data, A.data, B.data, alpha, beta, nullptr, /*model_product=*/true);
}

void CudaBackend::matmul_residual(Tensor D, const Tensor& A, bool trans_a, const Tensor& B, bool trans_b,
                                  const Tensor& R) {
  ScopedRange r(*this, "matmul");
  const GemmShape g = matmul_shape(D, A, trans_a, B, trans_b);
  check_float(R, "matmul_add", "R");
  if (g.M == 0 || g.N == 0) return;
  if (g.K == 0) {  // D = R
    copy(D.data, R.data, D.bytes());
    return;
  }
  gemm(g, D.data, A.data, B.data, 1.f, 1.f, R.data, /*model_product=*/true);
}

void CudaBackend::embedding_fwd(Tensor out, const Tensor& tokens, const Tensor& table) {
  ScopedRange r(*this, "embedding_fwd");
  check_float(out, "embedding_fwd", "out");
  check_float(table, "embedding_fwd", "table");
  check_cuda(tokens, "embedding_fwd", "tokens");
  TRAINER_CHECK(tokens.dtype == DType::i32, "embedding_fwd: tokens are {}, not i32", dtype_name(tokens.dtype));
  const int64_t N = tokens.numel(), V = table.rows(), D = table.cols();
  TRAINER_CHECK(out.cols() == D && out.rows() == N, "embedding_fwd: out {} is not [{}, {}]", out.shape_str(), N, D);
  kernels::embedding_fwd(out.data, out.dtype, tokens.ptr<int32_t>(), table.data, table.dtype, N, V, int(D), stream_);
}

void CudaBackend::embedding_bwd(Tensor dtable, const Tensor& tokens, const Tensor& dout) {
  ScopedRange r(*this, "embedding_bwd");
  check_float(dtable, "embedding_bwd", "dtable");
  check_float(dout, "embedding_bwd", "dout");
  check_cuda(tokens, "embedding_bwd", "tokens");
  TRAINER_CHECK(tokens.dtype == DType::i32, "embedding_bwd: tokens are {}, not i32", dtype_name(tokens.dtype));
  const int64_t N = tokens.numel(), V = dtable.rows(), D = dtable.cols();
  TRAINER_CHECK(dout.cols() == D && dout.rows() == N, "embedding_bwd: dout {} is not [{}, {}]", dout.shape_str(), N,
                D);
  if (N == 0) return;
  const size_t bytes = kernels::embedding_bwd_scratch_bytes(N, V);
  void* s = scratch(bytes);
  kernels::embedding_bwd(dtable.data, dtable.dtype, tokens.ptr<int32_t>(), dout.data, dout.dtype, N, V, int(D), s,
                         bytes, stream_);
}

void CudaBackend::rmsnorm_fwd(Tensor y, Tensor rstd, const Tensor& x, const Tensor& w, float eps) {
  ScopedRange r(*this, "rmsnorm_fwd");
  check_float(y, "rmsnorm_fwd", "y");
  check_float(x, "rmsnorm_fwd", "x");
  check_float(w, "rmsnorm_fwd", "w");
  check_cuda(rstd, "rmsnorm_fwd", "rstd");
  const int64_t N = x.rows(), D = x.cols();
  TRAINER_CHECK(y.rows() == N && y.cols() == D, "rmsnorm_fwd: y {} vs x {}", y.shape_str(), x.shape_str());
  TRAINER_CHECK(w.numel() == D, "rmsnorm_fwd: w {} for d_model {}", w.shape_str(), D);
  TRAINER_CHECK(rstd.dtype == DType::f32 && rstd.numel() == N, "rmsnorm_fwd: rstd {} {} for {} rows",
                dtype_name(rstd.dtype), rstd.shape_str(), N);
  kernels::rmsnorm_fwd(y.data, y.dtype, rstd.ptr<float>(), x.data, x.dtype, w.data, w.dtype, N, int(D), eps, stream_);
}

void CudaBackend::rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                              const Tensor& rstd, bool accumulate_dw) {
  ScopedRange r(*this, "rmsnorm_bwd");
  check_float(dx, "rmsnorm_bwd", "dx");
  check_float(dy, "rmsnorm_bwd", "dy");
  check_float(x, "rmsnorm_bwd", "x");
  check_float(w, "rmsnorm_bwd", "w");
  check_float(dw, "rmsnorm_bwd", "dw");
  check_cuda(rstd, "rmsnorm_bwd", "rstd");
  const int64_t N = x.rows(), D = x.cols();
  TRAINER_CHECK(dx.rows() == N && dx.cols() == D && dy.rows() == N && dy.cols() == D,
                "rmsnorm_bwd: dx {} and dy {} vs x {}", dx.shape_str(), dy.shape_str(), x.shape_str());
  TRAINER_CHECK(w.numel() == D && dw.numel() == D, "rmsnorm_bwd: w {}, dw {} {} for {}", w.shape_str(),
                dtype_name(dw.dtype), dw.shape_str(), D);
  TRAINER_CHECK(rstd.dtype == DType::f32 && rstd.numel() == N, "rmsnorm_bwd: rstd {} for {} rows", rstd.shape_str(),
                N);
  void* s = scratch(kernels::rmsnorm_bwd_scratch_bytes(N, int(D)));
  kernels::rmsnorm_bwd(dx.data, dx.dtype, dw.data, dw.dtype, dy.data, dy.dtype, x.data, x.dtype, w.data, w.dtype,
                       rstd.ptr<float>(), N, int(D), s, accumulate_dw, stream_);
}

void CudaBackend::rope(Tensor qkv, const AttnShape& s, float theta, bool inverse) {
  ScopedRange r(*this, "rope");
  check_float(qkv, "rope", "qkv");
  TRAINER_CHECK(s.d_head % 2 == 0, "rope: d_head {} is odd", s.d_head);
  TRAINER_CHECK(qkv.rows() == int64_t(s.B) * s.T && qkv.cols() == 3 * int64_t(s.H) * s.d_head,
                "rope: qkv {} is not [{}, {}]", qkv.shape_str(), int64_t(s.B) * s.T, 3 * int64_t(s.H) * s.d_head);
  const std::tuple<int, int, float> key{s.T, s.d_head, theta};
  if (!rope_table_.data() || rope_key_ != key) {  // one table per (T, d_head, theta), made on first use
    TRAINER_CHECK(live_graphs_ == 0, "rope: a new table (T {}, d_head {}) while a CUDA graph uses the old one", s.T,
                  s.d_head);
    rope_table_.reset();
    rope_table_ = alloc(cuda_sizes::rope_table_bytes(s.T, s.d_head), Category::workspace);
    kernels::rope_table(static_cast<float*>(rope_table_.data()), s.T, s.d_head, double(theta), stream_);
    rope_key_ = key;
  }
  kernels::rope(qkv.data, qkv.dtype, static_cast<const float*>(rope_table_.data()), qkv.rows(), s.T, s.H, s.d_head,
                inverse, stream_);
}

void CudaBackend::swiglu_fwd(Tensor g, const Tensor& ab) {
  ScopedRange r(*this, "swiglu_fwd");
  check_float(g, "swiglu_fwd", "g");
  check_float(ab, "swiglu_fwd", "ab");
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  TRAINER_CHECK(ab.cols() % 2 == 0 && g.rows() == N && g.cols() == F, "swiglu_fwd: g {} vs ab {}", g.shape_str(),
                ab.shape_str());
  kernels::swiglu_fwd(g.data, g.dtype, ab.data, ab.dtype, N, F, stream_);
}

void CudaBackend::swiglu_bwd(Tensor dab, const Tensor& dg, const Tensor& ab, Tensor g) {
  ScopedRange r(*this, "swiglu_bwd");
  check_float(dab, "swiglu_bwd", "dab");
  check_float(dg, "swiglu_bwd", "dg");
  check_float(ab, "swiglu_bwd", "ab");
  const int64_t N = ab.rows(), F = ab.cols() / 2;
  TRAINER_CHECK(ab.cols() % 2 == 0 && dg.rows() == N && dg.cols() == F && dab.rows() == N && dab.cols() == 2 * F,
                "swiglu_bwd: dab {}, dg {} vs ab {}", dab.shape_str(), dg.shape_str(), ab.shape_str());
  if (present(g)) {
    check_float(g, "swiglu_bwd", "g");
    TRAINER_CHECK(g.rows() == N && g.cols() == F, "swiglu_bwd: g {} vs ab {}", g.shape_str(), ab.shape_str());
  }
  kernels::swiglu_bwd(dab.data, dab.dtype, dg.data, dg.dtype, ab.data, ab.dtype, present(g) ? g.data : nullptr,
                      g.dtype, N, F, stream_);
}

void CudaBackend::add_inplace(Tensor x, const Tensor& y) {
  ScopedRange r(*this, "add_inplace");
  check_float(x, "add_inplace", "x");
  check_float(y, "add_inplace", "y");
  TRAINER_CHECK(x.numel() == y.numel(), "add_inplace: x {} {} vs y {} {}", dtype_name(x.dtype), x.shape_str(),
                dtype_name(y.dtype), y.shape_str());
  kernels::add_inplace(x.data, x.dtype, y.data, y.dtype, x.numel(), stream_);
}

void CudaBackend::cross_entropy(Tensor losses, Tensor dlogits, const Tensor& logits, const Tensor& targets,
                                float dscale) {
  ScopedRange r(*this, "cross_entropy");
  check_float(logits, "cross_entropy", "logits");
  check_cuda(losses, "cross_entropy", "losses");
  check_cuda(targets, "cross_entropy", "targets");
  const int64_t N = logits.rows(), V = logits.cols();
  TRAINER_CHECK(losses.dtype == DType::f32 && losses.numel() == N, "cross_entropy: losses {} {} for {} rows",
                dtype_name(losses.dtype), losses.shape_str(), N);
  TRAINER_CHECK(targets.dtype == DType::i32 && targets.numel() == N, "cross_entropy: targets {} {} for {} rows",
                dtype_name(targets.dtype), targets.shape_str(), N);
  if (present(dlogits)) {
    check_float(dlogits, "cross_entropy", "dlogits");
    TRAINER_CHECK(dlogits.rows() == N && dlogits.cols() == V, "cross_entropy: dlogits {} vs logits {}",
                  dlogits.shape_str(), logits.shape_str());
    TRAINER_CHECK(dlogits.data != logits.data || dlogits.dtype == logits.dtype,
                  "cross_entropy: dlogits aliases logits with another dtype");
  }
  kernels::cross_entropy(losses.ptr<float>(), present(dlogits) ? dlogits.data : nullptr, dlogits.dtype, logits.data,
                         logits.dtype, targets.ptr<int32_t>(), N, V, dscale, stream_);
}

double CudaBackend::reduce(const Tensor& x, bool square) {
  check_float(x, square ? "sum_squares" : "sum", "x");
  double* partials = static_cast<double*>(reduce_partials_.data());
  double* out = partials + kernels::kReduceMaxBlocks;
  kernels::reduce_sum(out, x.data, x.dtype, x.numel(), square, partials, stream_);
  CUDA_CHECK(cudaMemcpyAsync(host_result_, out, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host_result_;
}

double CudaBackend::sum(const Tensor& x) {
  ScopedRange r(*this, "sum");
  return reduce(x, false);
}

double CudaBackend::sum_squares(const Tensor& x) {
  ScopedRange r(*this, "sum_squares");
  return reduce(x, true);
}

void CudaBackend::clip_factor_to(const Tensor& g, double max_norm, double* sumsq, float* factor) {
  ScopedRange r(*this, "clip_factor");
  check_float(g, "clip_factor_to", "g");
  kernels::reduce_sum(sumsq, g.data, g.dtype, g.numel(), true, static_cast<double*>(reduce_partials_.data()), stream_);
  kernels::clip_factor(factor, sumsq, max_norm, stream_);
}

void CudaBackend::scale(Tensor x, float s) {
  ScopedRange r(*this, "scale");
  check_float(x, "scale", "x");
  kernels::scale(x.data, x.dtype, x.numel(), s, stream_);
}

void CudaBackend::cast(Tensor dst, const Tensor& src) {
  ScopedRange r(*this, "cast");
  check_cuda(dst, "cast", "dst");
  check_cuda(src, "cast", "src");
  TRAINER_CHECK(dst.numel() == src.numel(), "cast: dst {} vs src {}", dst.shape_str(), src.shape_str());
  TRAINER_CHECK(dst.dtype == src.dtype || (is_float(dst.dtype) && is_float(src.dtype)), "cast: {} to {}",
                dtype_name(src.dtype), dtype_name(dst.dtype));
  kernels::cast(dst.data, dst.dtype, src.data, src.dtype, dst.numel(), stream_);
}

namespace {
/// The kernels' form of a's constants (per_step = adamw_step_values(a)).
kernels::AdamWStep kernel_step(const AdamWArgs& a, const AdamWStepValues& per_step) {
  kernels::AdamWStep k;
  k.beta1 = float(a.beta1);
  k.beta2 = float(a.beta2);
  k.one_minus_beta1 = float(1.0 - a.beta1);
  k.one_minus_beta2 = float(1.0 - a.beta2);
  k.eps = float(a.eps);
  k.decay = per_step.decay;
  k.step_size = per_step.step_size;
  k.grad_scale = a.grad_scale;
  k.per_step = a.step_values;  // device copy of the same values (AdamW::begin_step), or null
  k.grad_scale_by = a.grad_scale_by;
  return k;
}
}  // namespace

double CudaBackend::adamw(Tensor p, const Tensor& g, Tensor m, Tensor v, Tensor p_work, const AdamWArgs& a) {
  ScopedRange r(*this, "adamw");
  const DType dt = p.dtype == DType::bf16 ? DType::bf16 : DType::f32;  // bf16 storage, or fp32
  for (const auto& [t, what] : {std::pair<const Tensor*, const char*>{&p, "p"}, {&g, "g"}, {&m, "m"}, {&v, "v"}}) {
    check_cuda(*t, "adamw", what);
    TRAINER_CHECK(t->dtype == dt && t->numel() == p.numel(), "adamw: {} is {} {}, p is {} with {} elements", what,
                  dtype_name(t->dtype), t->shape_str(), dtype_name(p.dtype), p.numel());
  }
  TRAINER_CHECK(dt == DType::bf16 || !a.stochastic_rounding,
                "adamw: stochastic rounding needs bf16 p, g, m and v (p is {})", dtype_name(p.dtype));
  TRAINER_CHECK(dt == DType::f32 || !present(p_work), "adamw: a working copy (p_work) with bf16 p");
  if (present(p_work)) {
    check_float(p_work, "adamw", "p_work");
    TRAINER_CHECK(p_work.numel() == p.numel(), "adamw: p_work {} vs p {}", p_work.shape_str(), p.shape_str());
  }
  TRAINER_CHECK(a.t >= 1, "adamw: step {} (t starts at 1)", a.t);
  const AdamWStepValues per_step = adamw_step_values(a);
  const kernels::AdamWStep k = kernel_step(a, per_step);
  double* partials = static_cast<double*>(reduce_partials_.data());
  double* out = nullptr;
  if (a.grad_sumsq) out = a.sumsq_to ? a.sumsq_to : partials + kernels::kReduceMaxBlocks;
  if (dt == DType::bf16) {
    const kernels::StochasticRounding sr{per_step.rounding_key, a.index_offset};
    kernels::adamw_bf16(p.ptr<bf16>(), g.ptr<bf16>(), m.ptr<bf16>(), v.ptr<bf16>(), p.numel(), k,
                        a.stochastic_rounding ? &sr : nullptr, out ? partials : nullptr, out, stream_);
  } else {
    kernels::adamw(p.ptr<float>(), g.ptr<float>(), m.ptr<float>(), v.ptr<float>(),
                   present(p_work) ? p_work.data : nullptr, p_work.dtype, p.numel(), k, out ? partials : nullptr, out,
                   stream_);
  }
  if (!out || a.sumsq_to) return 0.0;
  CUDA_CHECK(cudaMemcpyAsync(host_result_, out, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return *host_result_;
}

void CudaBackend::matmul_dw_adamw(Tensor p, Tensor m, Tensor v, Tensor p_work, const Tensor& dY, const Tensor& X,
                                  const AdamWArgs& a, Tensor g_buf, bool accumulate) {
  TRAINER_CHECK(!a.grad_sumsq || a.sumsq_to, "matmul_dw_adamw: the sum of g^2 needs a.sumsq_to (nothing returns it)");
#ifdef TRAINER_SM90
  kernels::DwAdamWArgs d;
  const bool f32_state = p.dtype == DType::f32 && m.dtype == DType::f32 && v.dtype == DType::f32 &&
                         (!present(p_work) || p_work.dtype == DType::bf16);
  const int64_t M = dY.cols(), N = X.cols(), K = dY.rows();
  if (f32_state && dY.dtype == DType::bf16 && X.dtype == DType::bf16 && !a.stochastic_rounding && K == X.rows() &&
      p.numel() == M * N && m.numel() == M * N && v.numel() == M * N && M <= INT32_MAX && N <= INT32_MAX &&
      K <= INT32_MAX && (!accumulate || (g_buf.dtype == DType::f32 && g_buf.numel() == M * N))) {
    d.dy = dY.ptr<bf16>(), d.ld_dy = M, d.x = X.ptr<bf16>(), d.ld_x = N;
    d.M = int(M), d.N = int(N), d.K = int(K);
    d.p = p.ptr<float>(), d.m = m.ptr<float>(), d.v = v.ptr<float>(), d.ld = N;
    d.p_work = present(p_work) ? p_work.ptr<bf16>() : nullptr;
    d.grad_in = accumulate ? g_buf.ptr<float>() : nullptr;  // (a slot without a sum: not needed)
    d.partials = static_cast<double*>(reduce_partials_.data());
    d.sumsq_out = a.grad_sumsq ? a.sumsq_to : nullptr;
    if (kernels::dw_adamw_supported(d)) {
      ScopedRange r(*this, "matmul_dw_adamw");
      for (const Tensor* t : {&p, &m, &v}) check_cuda(*t, "matmul_dw_adamw", "p, m, v");
      check_cuda(dY, "matmul_dw_adamw", "dY");
      check_cuda(X, "matmul_dw_adamw", "X");
      if (accumulate) check_cuda(g_buf, "matmul_dw_adamw", "g_buf");
      TRAINER_CHECK(a.t >= 1, "matmul_dw_adamw: step {} (t starts at 1)", a.t);
      d.a = kernel_step(a, adamw_step_values(a));
      kernels::dw_adamw(d, stream_);
      return;
    }
  }
#endif
  Backend::matmul_dw_adamw(p, m, v, p_work, dY, X, a, g_buf, accumulate);  // the product into g_buf (or a temporary)
}

}  // namespace trainer
