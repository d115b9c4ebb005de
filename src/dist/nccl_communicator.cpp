// NcclCommunicator: collectives over NCCL on device buffers (built only when CMake finds NCCL: TRAINER_HAVE_NCCL).
//
// Host side: the communicator keeps an MPI communicator over the same ranks (make_mpi_communicator, or its split),
// which carries the bootstrap, barrier() and the host-side collectives (all_reduce_host, ...), with MPI's timeout
// handling.
//
// Bootstrap: rank 0 calls ncclGetUniqueId, the host communicator broadcasts the id to every rank, each rank calls
// ncclCommInitRankConfig with blocking = 0 (non-blocking communicator: calls may return ncclInProgress, and
// ncclCommGetAsyncError reports the state; NCCL user guide, "Fault Tolerance"). The CUDA device is the one the backend
// selected (local rank). NCCL_NVLS_ENABLE is forced to 0: NVLink SHARP / multicast is not used (on the shared H200
// hosts it can take GPUs out of service; see launch/mpirun.sh).
//
// Streams: every collective runs on the communicator's own stream. Before it, an event recorded on the compute stream
// is waited for on the comm stream, so the collective sees every gradient written before the call; after it, an end
// event is recorded. Work::wait() makes the compute stream wait for that end event: the host does not block.
//
// Hangs and errors: a watchdog thread polls, every 20 ms, the end events of collectives in flight and
// ncclCommGetAsyncError. An asynchronous NCCL error, or a collective not complete parallel.comm_timeout_s after it
// was issued, aborts the communicator (ncclCommAbort) and then every rank (fatal(): message + MPI_Abort). The same
// deadline bounds the wait for ncclInProgress after each NCCL call.
//
// split(): ncclCommSplit of this communicator (NCCL >= 2.18; non-blocking like the parent, settled with the same
// deadline) beside the MPI split of the host communicator; the new one shares the device and the compute stream and
// has its own stream and watchdog.
//
// busy_ms(): the sum of the collectives' durations on the comm stream (start/end events, so all_reduce_many_via's
// casts count too; they run one after another there, so the sum is the time the stream was busy), since
// reset_busy(). Reading it syncs on those events.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "dist/mpi_communicator.h"
#include "elementwise.cuh"  // kernels::cast

namespace trainer {

namespace {

#define NCCL_CALL_CHECK(e) TRAINER_CHECK_LIB(e, ncclSuccess, ncclGetErrorString, "NCCL")
#define CUDA_CALL_CHECK(e) TRAINER_CHECK_LIB(e, cudaSuccess, cudaGetErrorString, "CUDA")

using Clock = std::chrono::steady_clock;

/// One collective: its timing events (start, end on the comm stream) and when the host issued it.
struct NcclOp {
  std::string what;  // "all_reduce of 4 MiB on 8 ranks"
  Clock::time_point issued;
  cudaEvent_t start = nullptr, end = nullptr;
  NcclOp() {
    CUDA_CALL_CHECK(cudaEventCreate(&start));
    CUDA_CALL_CHECK(cudaEventCreate(&end));
  }
  ~NcclOp() {
    cudaEventDestroy(start);  // allowed while pending: resources are released when the event completes
    cudaEventDestroy(end);
  }
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;
};

class NcclCommunicator;

class NcclWork final : public Work {
 public:
  NcclWork(cudaStream_t compute, std::shared_ptr<NcclOp> op) : compute_(compute), op_(std::move(op)) {}
  /// Orders the compute stream after the collective; returns at once.
  void wait() override { CUDA_CALL_CHECK(cudaStreamWaitEvent(compute_, op_->end, 0)); }

 private:
  cudaStream_t compute_;
  std::shared_ptr<NcclOp> op_;
};

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::avg ? ncclAvg : ncclSum; }

class NcclCommunicator final : public Communicator {
 public:
  /// Over the ranks of `host` (an MPI communicator, owned from now on): a new NCCL communicator (parent == nullptr),
  /// or the part `color` of ncclCommSplit(parent, color, key).
  NcclCommunicator(Backend& be, std::unique_ptr<Communicator> host, double timeout_s, ncclComm_t parent = nullptr,
                   int color = 0, int key = 0)
      : be_(be), host_(std::move(host)), rank_(host_->rank()), size_(host_->size()), timeout_s_(timeout_s) {
    setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
    compute_ = static_cast<cudaStream_t>(be.stream());
    CUDA_CALL_CHECK(cudaGetDevice(&device_));
    CUDA_CALL_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CALL_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const char* what = parent ? "ncclCommSplit" : "ncclCommInitRankConfig";
    ncclResult_t st = ncclSuccess;
    if (parent) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
      st = ncclCommSplit(parent, color, key, &comm_, &config);
#else
      (void)color, (void)key;
#endif
    } else {
      ncclUniqueId id{};
      if (rank_ == 0) NCCL_CALL_CHECK(ncclGetUniqueId(&id));
      host_->broadcast_host(&id, sizeof id, /*root=*/0);
      st = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    }
    if (st != ncclSuccess && st != ncclInProgress) fatal("NCCL", what, __FILE__, __LINE__, ncclGetErrorString(st));
    TRAINER_CHECK(comm_ != nullptr, "{}: no communicator returned", what);
    settle(what, Clock::now());
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    // Flush and tear down without blocking forever: finalize, poll, abort if the peers never answer.
    if (comm_) {
      const ncclResult_t st = ncclCommFinalize(comm_);
      bool clean = st == ncclSuccess || st == ncclInProgress;
      const auto deadline = Clock::now() + std::chrono::seconds(30);
      ncclResult_t state = ncclInProgress;
      while (clean && state == ncclInProgress && Clock::now() < deadline) {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (clean && state == ncclSuccess) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    }
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<Work> all_reduce(Tensor buf, ReduceOp op, bool async) override {
    check(buf, "all_reduce: buf", /*any_float=*/true);
    auto o = begin("all_reduce", buf.bytes());
    enqueue(*o, ncclAllReduce(buf.data, buf.data, size_t(buf.numel()), nccl_type(buf), nccl_op(op), comm_, stream_));
    return finish(std::move(o), async);
  }

  std::unique_ptr<Work> all_reduce_many(const std::vector<Tensor>& bufs, ReduceOp op, bool async) override {
    size_t bytes = 0;
    for (const Tensor& b : bufs) {
      check(b, "all_reduce_many: buf", /*any_float=*/true);
      bytes += b.bytes();
    }
    auto o = begin("all_reduce", bytes);
    if (bufs.size() > 1) o->what += fmt::format(" ({} tensors, one group)", bufs.size());
    enqueue(*o, ncclGroupStart());
    for (const Tensor& b : bufs)
      enqueue(*o, ncclAllReduce(b.data, b.data, size_t(b.numel()), nccl_type(b), nccl_op(op), comm_, stream_));
    enqueue(*o, ncclGroupEnd());
    return finish(std::move(o), async);
  }

  std::unique_ptr<Work> all_reduce_many_via(const std::vector<Tensor>& bufs, const std::vector<Tensor>& wire,
                                            ReduceOp op, bool async) override {
    TRAINER_CHECK(bufs.size() == wire.size(), "all_reduce_many_via: {} buffers but {} wire tensors", bufs.size(),
                  wire.size());
    size_t bytes = 0;
    for (size_t i = 0; i < bufs.size(); ++i) {
      check(bufs[i], "all_reduce_many_via: buf");
      check(wire[i], "all_reduce_many_via: wire", /*any_float=*/true);
      TRAINER_CHECK(wire[i].numel() == bufs[i].numel(), "all_reduce_many_via: wire {} has {} elements, buf {}", i,
                    wire[i].numel(), bufs[i].numel());
      bytes += wire[i].bytes();
    }
    auto o = begin("all_reduce", bytes);
    o->what += fmt::format(" ({} tensors as {}, one group)", bufs.size(),
                           wire.empty() ? "f32" : dtype_name(wire[0].dtype));
    for (size_t i = 0; i < bufs.size(); ++i)
      kernels::cast(wire[i].data, wire[i].dtype, bufs[i].data, DType::f32, bufs[i].numel(), stream_);
    enqueue(*o, ncclGroupStart());
    for (const Tensor& w : wire)
      enqueue(*o, ncclAllReduce(w.data, w.data, size_t(w.numel()), nccl_type(w), nccl_op(op), comm_, stream_));
    enqueue(*o, ncclGroupEnd());
    for (size_t i = 0; i < bufs.size(); ++i)
      kernels::cast(bufs[i].data, DType::f32, wire[i].data, wire[i].dtype, bufs[i].numel(), stream_);
    return finish(std::move(o), async);
  }

  bool reduce_scatter_in_place() const override { return true; }  // recvbuff = sendbuff + rank * recvcount

  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op, bool async) override {
    check(out, "reduce_scatter: out");
    check(in, "reduce_scatter: in");
    TRAINER_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: in has {} elements, expected {} ranks x {}",
                  in.numel(), size_, out.numel());
    auto o = begin("reduce_scatter", in.bytes());
    enqueue(*o, ncclReduceScatter(in.data, out.data, size_t(out.numel()), ncclFloat32, nccl_op(op), comm_, stream_));
    return finish(std::move(o), async);
  }

  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in, bool async) override {
    check(out, "all_gather: out", /*any_float=*/true);
    check(in, "all_gather: in", /*any_float=*/true);
    TRAINER_CHECK(out.dtype == in.dtype, "all_gather: out is {} but in is {}", dtype_name(out.dtype),
                  dtype_name(in.dtype));
    TRAINER_CHECK(out.numel() == in.numel() * size_, "all_gather: out has {} elements, expected {} ranks x {}",
                  out.numel(), size_, in.numel());
    auto o = begin("all_gather", out.bytes());
    // In place when in == out + rank * n (NCCL handles it).
    const ncclDataType_t t = nccl_type(in);
    enqueue(*o, ncclAllGather(in.data, out.data, size_t(in.numel()), t, comm_, stream_));
    return finish(std::move(o), async);
  }

  std::unique_ptr<Work> broadcast(Tensor buf, int root, bool async) override {
    check(buf, "broadcast: buf");
    TRAINER_CHECK(root >= 0 && root < size_, "broadcast: root {} outside [0, {})", root, size_);
    auto o = begin("broadcast", buf.bytes());
    enqueue(*o, ncclBroadcast(buf.data, buf.data, size_t(buf.numel()), ncclFloat32, root, comm_, stream_));
    return finish(std::move(o), async);
  }

  void barrier() override { host_->barrier(); }

  void all_reduce_host(double* v, size_t n, HostOp op) override { host_->all_reduce_host(v, n, op); }
  void all_reduce_host(int64_t* v, size_t n, HostOp op) override { host_->all_reduce_host(v, n, op); }
  void all_reduce_host(uint64_t* v, size_t n, HostOp op) override { host_->all_reduce_host(v, n, op); }
  void all_gather_host(const void* mine, size_t bytes, void* all) override {
    host_->all_gather_host(mine, bytes, all);
  }
  void broadcast_host(void* data, size_t bytes, int root) override { host_->broadcast_host(data, bytes, root); }
  HostTimeout set_host_timeout(HostTimeout t) override { return host_->set_host_timeout(t); }
  std::vector<std::string> gather_host(const std::string& mine, int root) override {
    return host_->gather_host(mine, root);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    TRAINER_CHECK(color >= 0, "split: color {} must be >= 0", color);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    auto host = host_->split(color, key);  // the same ranks, the same order (MPI_Comm_split and ncclCommSplit both
                                           // rank by key, ties by the parent rank)
    return std::make_unique<NcclCommunicator>(be_, std::move(host), timeout_s_, comm_, color, key);
#else
    (void)key;
    throw RuntimeError(fmt::format("nccl communicator: split needs NCCL >= 2.18 (ncclCommSplit); this trainer was "
                                   "built with NCCL {}.{} (use parallel.comm=mpi)", NCCL_MAJOR, NCCL_MINOR));
#endif
  }

  double busy_ms() const override {
    double ms = 0;
    for (const auto& o : timed_) {
      CUDA_CALL_CHECK(cudaEventSynchronize(o->end));
      float t = 0;
      CUDA_CALL_CHECK(cudaEventElapsedTime(&t, o->start, o->end));
      ms += t;
    }
    return ms;
  }
  void reset_busy() override { timed_.clear(); }
  std::vector<CommSpan> spans(Event& origin, Clock::time_point) const override {
    auto* o0 = static_cast<cudaEvent_t>(origin.native_handle());
    TRAINER_CHECK(o0 != nullptr, "nccl communicator: spans() needs a CUDA event as origin");
    std::vector<CommSpan> out;
    for (const auto& o : timed_) {
      CUDA_CALL_CHECK(cudaEventSynchronize(o->end));
      float a = 0, b = 0;
      CUDA_CALL_CHECK(cudaEventElapsedTime(&a, o0, o->start));
      CUDA_CALL_CHECK(cudaEventElapsedTime(&b, o0, o->end));
      out.push_back({o->what, a, b});
    }
    return out;
  }

 private:
  static ncclDataType_t nccl_type(const Tensor& t) { return t.dtype == DType::bf16 ? ncclBfloat16 : ncclFloat32; }
  /// f32, or also bf16 (any_float: all_reduce, all_gather).
  void check(const Tensor& t, const char* what, bool any_float = false) const {
    TRAINER_CHECK(t.dtype == DType::f32 || (any_float && t.dtype == DType::bf16),
                  "nccl communicator: {} has dtype {}, expected f32{}", what, dtype_name(t.dtype),
                  any_float ? " or bf16" : "");
    TRAINER_CHECK(t.device == Device::cuda, "nccl communicator: {} is not a device buffer (use comm mpi)", what);
  }

  /// A new op ordered after the compute stream: ready_ recorded there, waited for on the comm stream, then start.
  std::shared_ptr<NcclOp> begin(const char* kind, size_t bytes) {
    auto o = std::make_shared<NcclOp>();
    o->what = fmt::format("{} of {} on {} ranks", kind, format_bytes(bytes), size_);
    o->issued = Clock::now();
    CUDA_CALL_CHECK(cudaEventRecord(ready_, compute_));
    CUDA_CALL_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
    CUDA_CALL_CHECK(cudaEventRecord(o->start, stream_));
    return o;
  }

  /// Checks the return of an NCCL collective call and waits (bounded) until it is enqueued.
  void enqueue(NcclOp& o, ncclResult_t st) {
    if (st != ncclSuccess && st != ncclInProgress) abort_all(o.what, fmt::format("{}", ncclGetErrorString(st)));
    if (st == ncclInProgress) settle(o.what, o.issued);
  }

  std::unique_ptr<Work> finish(std::shared_ptr<NcclOp> o, bool async) {
    CUDA_CALL_CHECK(cudaEventRecord(o->end, stream_));
    timed_.push_back(o);
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.push_back(o);
    }
    auto w = std::make_unique<NcclWork>(compute_, std::move(o));
    if (!async) w->wait();
    return w;
  }

  /// Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress; aborts on an error or the deadline.
  void settle(const std::string& what, Clock::time_point since) {
    const auto deadline = since + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout_s_));
    for (;;) {
      ncclResult_t state = ncclSuccess;
      NCCL_CALL_CHECK(ncclCommGetAsyncError(comm_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) abort_all(what, ncclGetErrorString(state));
      if (Clock::now() > deadline)
        abort_all(what, fmt::format("still in progress after {} s (parallel.comm_timeout_s)", timeout_s_));
      std::this_thread::yield();
    }
  }

  /// The watchdog: drops completed collectives, aborts on an async error or a collective past its deadline.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_) break;
      while (!inflight_.empty()) {
        NcclOp& o = *inflight_.front();
        const cudaError_t q = cudaEventQuery(o.end);
        if (q == cudaSuccess) {
          inflight_.pop_front();
          continue;
        }
        if (q != cudaErrorNotReady) abort_all(o.what, fmt::format("CUDA error {}", cudaGetErrorString(q)));
        const double age = std::chrono::duration<double>(Clock::now() - o.issued).count();
        if (age > timeout_s_)
          abort_all(o.what, fmt::format("collective not complete {:.1f} s after it was issued "
                                        "(parallel.comm_timeout_s = {} s): a rank is stuck, has died or did not "
                                        "call it; aborting all ranks", age, timeout_s_));
        break;  // ops complete in order on the comm stream: the rest are younger
      }
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        abort_all("asynchronous NCCL error", ncclGetErrorString(state));
    }
  }

  [[noreturn]] void abort_all(const std::string& what, const std::string& why) {
    ncclCommAbort(comm_);  // releases the GPU side so that MPI_Abort can take the processes down
    fatal("NCCL", what.c_str(), __FILE__, __LINE__, why);
  }

  Backend& be_;
  std::unique_ptr<Communicator> host_;  // MPI over the same ranks: bootstrap, barrier, host-side collectives
  int rank_, size_;
  double timeout_s_;
  int device_ = 0;
  cudaStream_t compute_ = nullptr;  // the backend's compute stream
  cudaStream_t stream_ = nullptr;   // this communicator's stream
  cudaEvent_t ready_ = nullptr;     // compute-stream point each collective waits for
  ncclComm_t comm_ = nullptr;
  std::vector<std::shared_ptr<NcclOp>> timed_;  // since reset_busy(), for busy_ms()
  std::mutex mu_;                               // guards inflight_ and stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<NcclOp>> inflight_;  // issued, not yet seen complete by the watchdog
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Backend& be, double timeout_s) {
  return std::make_unique<NcclCommunicator>(be, make_mpi_communicator(be, timeout_s), timeout_s);
}

}  // namespace trainer
