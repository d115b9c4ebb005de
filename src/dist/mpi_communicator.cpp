// MpiCommunicator: collectives over MPI (a duplicate of MPI_COMM_WORLD, so they never mix with MPI calls made
// elsewhere, e.g. the start-up agreement in main; or a split of such a communicator).
//
// Buffers: a host tensor (Device::cpu) is handed to MPI as is. A device tensor (Device::cuda) is staged: the compute
// stream is synchronised, the data copied into a pinned host block (Backend::copy_to_host), the collective runs on
// that block, and Work::wait() copies the result back (Backend::copy_from_host). Pinned blocks are cached, so a
// steady-state step allocates nothing. (They are host memory and not counted in the device pool's categories.)
//
// Synchronous and asynchronous calls: an asynchronous collective is issued as MPI_I* (non-blocking), and wait() polls
// MPI_Testall until it completes or parallel.comm_timeout_s has passed since it was issued. A synchronous collective
// is the blocking MPI call (MPI_Allreduce, ...), watched by a watchdog thread with the same deadline; blocking calls
// use Open MPI's tuned algorithms, faster than the libnbc schedules behind MPI_I* for large buffers (100 MiB
// all_reduce, 2 ranks, Open MPI 4.1.6 on the H200 host: 99 ms blocking vs 148 ms MPI_Iallreduce + MPI_Test; with
// device buffers staged, the trainer's all_reduce went from 345 to 103 ms). Either way a timeout calls fatal(), which
// prints one message naming the collective and MPI_Aborts every rank. (Without MPI_THREAD_MULTIPLE the watchdog may
// not call MPI: synchronous calls then take the polled non-blocking path.) Open MPI progresses non-blocking
// collectives only inside MPI calls, so issuing a collective also tests the ones still in flight: that makes them
// progress during backward (ddp_overlap) and dates their completion for busy_ms().
//
// Host-side collectives (all_reduce_host, all_gather_host, broadcast_host, gather_host) and split() take the same
// synchronous path (blocking call under the watchdog, or polled) but are not recorded for busy_ms() / spans(): they
// are bookkeeping (loss sums, statistics, layout checks), not the gradient traffic the strategies time. They and
// barrier() wait up to the host-side timeout (set_host_timeout: comm_timeout_s unless a checkpoint's writes raised it).
//
// ReduceOp::avg is MPI_SUM followed by a scale by 1/size() on the host (MPI has no average operation); it is
// applied in wait(). MPI counts are int: all_reduce and broadcast are split into pieces of at most 2^30 elements;
// reduce_scatter and all_gather need at most INT_MAX elements per rank.
//
// Aliasing: all_gather may run in place (in == out + rank*n, as MPI_IN_PLACE and NCCL allow); otherwise the input
// and output of reduce_scatter / all_gather must not overlap.
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.h"

#ifdef TRAINER_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace trainer {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMaxPiece = int64_t(1) << 30;  // elements per MPI call (MPI counts are int)

// ---- pinned host blocks for staging ------------------------------------------------------------------------------

struct Block {
  void* ptr = nullptr;
  size_t bytes = 0;
};

/// Host memory for staging device buffers: pinned (cudaHostAlloc) when the backend is a GPU, so copies run at full
/// link rate; 64-byte aligned malloc otherwise (also in CUDA builds on machines without a GPU). Freed blocks are kept
/// and reused (best fit by size) for the pool's life: the host memory it holds is the sum of the blocks it ever had to
/// add, not the largest collective. `counting`: a model of the pool that allocates nothing (staging_pool_bytes).
class StagingPool {
 public:
  explicit StagingPool(bool pinned, bool counting = false) : pinned_(pinned), counting_(counting) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool() {
    for (Block& b : free_) free_block(b);
  }
  Block acquire(size_t bytes) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
    if (best != free_.end()) {
      Block b = *best;
      free_.erase(best);
      return b;
    }
    Block b = alloc_block(std::max<size_t>(bytes, 64));
    held_ = held_ > SIZE_MAX - b.bytes ? SIZE_MAX : held_ + b.bytes;  // (saturates: a model of impossible sizes)
    return b;
  }
  void release(Block b) { free_.push_back(b); }
  /// Bytes of all blocks this pool holds, free or in use.
  size_t held_bytes() const { return held_; }

 private:
  Block alloc_block(size_t bytes) const {
    Block b{nullptr, bytes};
    if (counting_) return b;
#ifdef TRAINER_HAVE_CUDA
    if (pinned_) {
      const cudaError_t st = cudaHostAlloc(&b.ptr, bytes, cudaHostAllocPortable);
      if (st != cudaSuccess)
        throw OutOfMemory(fmt::format("mpi communicator: pinned host staging buffer of {} failed: {}",
                                      format_bytes(bytes), cudaGetErrorString(st)));
      return b;
    }
#endif
    b.ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!b.ptr)
      throw OutOfMemory(fmt::format("mpi communicator: host staging buffer of {} failed", format_bytes(bytes)));
    return b;
  }
  void free_block(Block& b) const {
    if (counting_) return;
#ifdef TRAINER_HAVE_CUDA
    if (pinned_) {
      cudaFreeHost(b.ptr);
      b.ptr = nullptr;
      return;
    }
#endif
    std::free(b.ptr);
    b.ptr = nullptr;
  }
  bool pinned_, counting_;
  size_t held_ = 0;
  std::vector<Block> free_;
};

// ---- one collective in flight --------------------------------------------------------------------------------------

struct MpiOp {
  std::string what;                 // "all_reduce of 4 MiB on 2 ranks", for the timeout message
  bool async = false;               // MPI_I* + polling; else the blocking call
  std::vector<MPI_Request> reqs;    // one per piece (async)
  Clock::time_point issued, completed;
  HostTimeout timeout{0, ""};       // its deadline after `issued` and the key that set it (comm_timeout_s, or the
                                    // host-side timeout in effect when a host-side op was issued)
  bool complete = false;            // MPI reports every request done
  bool finished = false;            // post-processing done (avg scale, copy back) and staging released
  bool timed = true;                // recorded for busy_ms() and spans() (false: host-side collectives)
  float* scale_data = nullptr;      // ReduceOp::avg: scale_n elements at scale_data *= scale, after completion
  int64_t scale_n = 0;
  float scale = 1.f;
  void* copy_dst = nullptr;         // staged: device destination of the result ...
  const void* copy_src = nullptr;   // ... copied from this host block ...
  size_t copy_bytes = 0;            // ... after completion
  std::vector<Block> blocks;        // staging blocks to give back
};

bool overlap(const void* a, size_t na, const void* b, size_t nb) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

class MpiCommunicator;

class MpiWork final : public Work {
 public:
  MpiWork(MpiCommunicator* comm, std::shared_ptr<MpiOp> op) : comm_(comm), op_(std::move(op)) {}
  ~MpiWork() override;  // a Work dropped without wait() is still completed (the buffers stay valid until then)
  void wait() override;

 private:
  MpiCommunicator* comm_;
  std::shared_ptr<MpiOp> op_;
};

class MpiCommunicator final : public Communicator {
 public:
  /// Takes ownership of `comm` (a duplicate or a split: freed by the destructor).
  MpiCommunicator(Backend& be, double timeout_s, bool stage_host, MPI_Comm comm)
      : be_(be), timeout_s_(timeout_s), stage_host_(stage_host), comm_(comm), pool_(be.device() == Device::cuda),
        test_error_(std::getenv("TRAINER_TEST_MPI_ERROR") != nullptr) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    reset_time_ = Clock::now();
    int level = 0;
    MPI_CHECK(MPI_Query_thread(&level));
    if (level == MPI_THREAD_MULTIPLE) watchdog_ = std::thread([this] { watch(); });
  }
  ~MpiCommunicator() override {
    while (!inflight_.empty()) finish(*inflight_.front());
    if (watchdog_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(wd_mu_);
        wd_stop_ = true;
      }
      wd_cv_.notify_all();
      watchdog_.join();
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<Work> all_reduce(Tensor buf, ReduceOp op, bool async) override {
    check_f32(buf, "all_reduce: buf");
    const int64_t n = buf.numel();
    auto o = new_op("all_reduce", buf.bytes(), async);
    float* data = buf.ptr<float>();
    if (staged(buf)) {
      data = static_cast<float*>(stage_in(*o, buf.data, buf.bytes()));
      set_copy_back(*o, buf.data, data, buf.bytes());
    }
    if (op == ReduceOp::avg) set_avg(*o, data, n);
    for (int64_t off = 0; off < n; off += kMaxPiece) {
      const int cnt = int(std::min(kMaxPiece, n - off));
      issue(*o, [&](MPI_Request* r) {
        return r ? MPI_Iallreduce(MPI_IN_PLACE, data + off, cnt, MPI_FLOAT, MPI_SUM, comm_, r)
                 : MPI_Allreduce(MPI_IN_PLACE, data + off, cnt, MPI_FLOAT, MPI_SUM, comm_);
      });
    }
    return launch(std::move(o));
  }

  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op, bool async) override {
    check_f32(out, "reduce_scatter: out");
    check_f32(in, "reduce_scatter: in");
    const int64_t n = out.numel();
    TRAINER_CHECK(in.numel() == n * size_, "reduce_scatter: in has {} elements, expected {} ranks x {}", in.numel(),
                  size_, n);
    TRAINER_CHECK(n <= INT_MAX, "reduce_scatter: {} elements per rank exceed MPI's int count", n);
    auto o = new_op("reduce_scatter", in.bytes(), async);
    const float* src = in.ptr<float>();
    float* dst = out.ptr<float>();
    if (staged(out) || staged(in)) {
      src = static_cast<const float*>(stage_in(*o, in.data, in.bytes()));
      dst = static_cast<float*>(stage_out(*o, out.bytes()));
      set_copy_back(*o, out.data, dst, out.bytes());
    } else {
      TRAINER_CHECK(!overlap(in.data, in.bytes(), out.data, out.bytes()), "reduce_scatter: in and out overlap");
    }
    if (op == ReduceOp::avg) set_avg(*o, dst, n);
    issue(*o, [&](MPI_Request* r) {
      return r ? MPI_Ireduce_scatter_block(src, dst, int(n), MPI_FLOAT, MPI_SUM, comm_, r)
               : MPI_Reduce_scatter_block(src, dst, int(n), MPI_FLOAT, MPI_SUM, comm_);
    });
    return launch(std::move(o));
  }

  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in, bool async) override {
    // Bytes only move, so any dtype goes as an MPI type of its element size (the count stays in elements).
    check_f32(out, "all_gather: out", /*any_dtype=*/true);
    check_f32(in, "all_gather: in", /*any_dtype=*/true);
    TRAINER_CHECK(out.dtype == in.dtype, "all_gather: out is {} but in is {}", dtype_name(out.dtype),
                  dtype_name(in.dtype));
    const int64_t n = in.numel(), nb = int64_t(in.bytes());
    TRAINER_CHECK(out.numel() == n * size_, "all_gather: out has {} elements, expected {} ranks x {}", out.numel(),
                  size_, n);
    TRAINER_CHECK(n <= INT_MAX, "all_gather: {} elements per rank exceed MPI's int count", n);
    const size_t es = dtype_size(in.dtype);
    TRAINER_CHECK(es == 4 || es == 2, "all_gather: elements of {} bytes", es);
    const MPI_Datatype type = es == 4 ? MPI_FLOAT : MPI_UINT16_T;
    auto o = new_op("all_gather", out.bytes(), async);
    char* dst = static_cast<char*>(out.data);
    const bool in_place = in.data == static_cast<void*>(dst + rank_ * nb);
    if (staged(out) || staged(in)) {
      // Stage as an in-place gather: this rank's piece goes straight to its slot of the host block.
      dst = static_cast<char*>(stage_out(*o, out.bytes()));
      if (n > 0) {
        be_.synchronize();
        be_.copy_to_host(dst + rank_ * nb, in.data, in.bytes());
      }
      set_copy_back(*o, out.data, dst, out.bytes());
    } else if (!in_place) {
      TRAINER_CHECK(!overlap(in.data, in.bytes(), out.data, out.bytes()),
                    "all_gather: in overlaps out other than as out's own slot (in place)");
      std::copy_n(static_cast<const char*>(in.data), nb, dst + rank_ * nb);  // then gather in place: one code path
    }
    issue(*o, [&](MPI_Request* r) {
      return r ? MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, int(n), type, comm_, r)
               : MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, int(n), type, comm_);
    });
    return launch(std::move(o));
  }

  std::unique_ptr<Work> broadcast(Tensor buf, int root, bool async) override {
    check_f32(buf, "broadcast: buf");
    TRAINER_CHECK(root >= 0 && root < size_, "broadcast: root {} outside [0, {})", root, size_);
    const int64_t n = buf.numel();
    auto o = new_op("broadcast", buf.bytes(), async);
    float* data = buf.ptr<float>();
    if (staged(buf)) {
      data = static_cast<float*>(rank_ == root ? stage_in(*o, buf.data, buf.bytes()) : stage_out(*o, buf.bytes()));
      if (rank_ != root) set_copy_back(*o, buf.data, data, buf.bytes());
    }
    for (int64_t off = 0; off < n; off += kMaxPiece) {
      const int cnt = int(std::min(kMaxPiece, n - off));
      issue(*o, [&](MPI_Request* r) {
        return r ? MPI_Ibcast(data + off, cnt, MPI_FLOAT, root, comm_, r)
                 : MPI_Bcast(data + off, cnt, MPI_FLOAT, root, comm_);
      });
    }
    return launch(std::move(o));
  }

  void barrier() override {
    auto o = new_op("barrier", 0, /*async=*/false);
    o->timeout = host_timeout_;
    issue(*o, [&](MPI_Request* r) { return r ? MPI_Ibarrier(comm_, r) : MPI_Barrier(comm_); });
    launch(std::move(o));
  }

  // ---- host-side collectives ------------------------------------------------------------------------------------

  void all_reduce_host(double* v, size_t n, HostOp op) override { host_reduce(v, n, MPI_DOUBLE, op); }
  void all_reduce_host(int64_t* v, size_t n, HostOp op) override { host_reduce(v, n, MPI_INT64_T, op); }
  void all_reduce_host(uint64_t* v, size_t n, HostOp op) override { host_reduce(v, n, MPI_UINT64_T, op); }

  void all_gather_host(const void* mine, size_t bytes, void* all) override {
    TRAINER_CHECK(bytes <= size_t(INT_MAX), "all_gather_host: {} bytes per rank exceed MPI's int count", bytes);
    char* dst = static_cast<char*>(all);
    if (bytes) std::memmove(dst + size_t(rank_) * bytes, mine, bytes);  // then gather in place
    if (size_ == 1 || bytes == 0) return;
    host_op("all_gather_host", bytes * size_t(size_), [&](MPI_Request* r) {
      return r ? MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, int(bytes), MPI_BYTE, comm_, r)
               : MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, int(bytes), MPI_BYTE, comm_);
    });
  }

  void broadcast_host(void* data, size_t bytes, int root) override {
    TRAINER_CHECK(root >= 0 && root < size_, "broadcast_host: root {} outside [0, {})", root, size_);
    TRAINER_CHECK(bytes <= size_t(INT_MAX), "broadcast_host: {} bytes exceed MPI's int count", bytes);
    if (size_ == 1 || bytes == 0) return;
    host_op("broadcast_host", bytes, [&](MPI_Request* r) {
      return r ? MPI_Ibcast(data, int(bytes), MPI_BYTE, root, comm_, r)
               : MPI_Bcast(data, int(bytes), MPI_BYTE, root, comm_);
    });
  }

  HostTimeout set_host_timeout(HostTimeout t) override { return std::exchange(host_timeout_, t); }

  std::vector<std::string> gather_host(const std::string& mine, int root) override {
    TRAINER_CHECK(root >= 0 && root < size_, "gather_host: root {} outside [0, {})", root, size_);
    if (size_ == 1) return {mine};
    std::vector<int64_t> lengths(static_cast<size_t>(size_));
    const int64_t n = int64_t(mine.size());
    all_gather_host(&n, sizeof n, lengths.data());
    int64_t total = 0;
    for (int64_t len : lengths) total += len;
    TRAINER_CHECK(total < INT_MAX, "gather_host: the ranks' strings are {} bytes together, over 2 GiB", total);
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int i = 0, off = 0; i < size_; off += counts[size_t(i)], ++i) {
      counts[size_t(i)] = int(lengths[size_t(i)]);
      displs[size_t(i)] = off;
    }
    std::string buf(rank_ == root ? size_t(total) : 0, '\0');
    host_op("gather_host", size_t(total), [&](MPI_Request* r) {
      return r ? MPI_Igatherv(mine.data(), int(n), MPI_CHAR, buf.data(), counts.data(), displs.data(), MPI_CHAR,
                              root, comm_, r)
               : MPI_Gatherv(mine.data(), int(n), MPI_CHAR, buf.data(), counts.data(), displs.data(), MPI_CHAR, root,
                             comm_);
    });
    std::vector<std::string> out;
    if (rank_ != root) return out;
    for (int i = 0; i < size_; ++i) out.push_back(buf.substr(size_t(displs[size_t(i)]), size_t(counts[size_t(i)])));
    return out;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    TRAINER_CHECK(color >= 0, "split: color {} must be >= 0", color);
    MPI_Comm sub = MPI_COMM_NULL;
    // MPI has no non-blocking split: the blocking call under the watchdog (where there is one).
    auto o = new_op("split", 0, /*async=*/false);
    o->timed = false;
    if (const int rc = watched(*o, [&] { return MPI_Comm_split(comm_, color, key, &sub); }); rc != MPI_SUCCESS)
      fatal("MPI", o->what.c_str(), __FILE__, __LINE__, mpi_error_string(rc));
    return std::make_unique<MpiCommunicator>(be_, timeout_s_, stage_host_, sub);
  }

  /// Host ms during which at least one collective was in flight (union of [issue, completion observed]) since the
  /// last reset_busy(); collectives still in flight are not counted yet.
  double busy_ms() const override {
    std::vector<std::pair<Clock::time_point, Clock::time_point>> iv;  // [issued, completed] of the finished ops
    for (const auto& [what, a, b] : done_) iv.emplace_back(a, b);
    std::sort(iv.begin(), iv.end());
    double ms = 0;
    Clock::time_point end = reset_time_;
    for (auto [a, b] : iv) {
      a = std::max(a, end);
      if (b > a) {
        ms += std::chrono::duration<double, std::milli>(b - a).count();
        end = b;
      }
    }
    return ms;
  }
  std::vector<CommSpan> spans(Event&, Clock::time_point host_origin) const override {
    std::vector<CommSpan> out;
    for (const auto& [what, a, b] : done_)
      out.push_back({what, std::chrono::duration<double, std::milli>(a - host_origin).count(),
                     std::chrono::duration<double, std::milli>(b - host_origin).count()});
    return out;
  }
  void reset_busy() override {
    done_.clear();
    reset_time_ = Clock::now();
  }

  /// Completes `op`: polls until MPI reports it done (fatal() after the timeout), then applies the avg scale and
  /// copies a staged result back to the device, and gives the staging blocks back. Idempotent.
  void finish(MpiOp& op) {
    if (op.finished) return;
    const auto deadline = op.issued + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(op.timeout.seconds));
    while (!op.complete) {
      test(op);
      if (op.complete) break;
      if (Clock::now() > deadline) timeout(op);
      // Poll without sleeping: a non-blocking collective advances only inside MPI calls (Open MPI's libnbc moves
      // one round per progress call), so a sleep here throttles large collectives. Yield the core instead, for
      // runs with more ranks than cores (CI); this is what a blocking MPI call does too.
      std::this_thread::yield();
    }
    if (op.scale_data)
      for (int64_t i = 0; i < op.scale_n; ++i) op.scale_data[i] *= op.scale;
    if (op.copy_bytes) be_.copy_from_host(op.copy_dst, op.copy_src, op.copy_bytes);
    for (Block& b : op.blocks) pool_.release(b);
    op.blocks.clear();
    op.finished = true;
    if (op.timed) done_.emplace_back(op.what, op.issued, op.completed);
    inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                   [&](const std::shared_ptr<MpiOp>& p) { return p.get() == &op; }),
                    inflight_.end());
  }

 private:
  /// f32 (reductions), or any dtype where bytes only move (any_dtype).
  void check_f32(const Tensor& t, const char* what, bool any_dtype = false) const {
    TRAINER_CHECK(any_dtype || t.dtype == DType::f32, "mpi communicator: {} has dtype {}, expected f32", what,
                  dtype_name(t.dtype));
    TRAINER_CHECK(t.device == Device::cpu || be_.device() == t.device,
                  "mpi communicator: {} lives on a device the backend '{}' cannot copy from", what, be_.name());
  }
  bool staged(const Tensor& t) const { return stage_host_ || t.device != Device::cpu; }

  /// A new op, issued now (staging copies count as communication time). Tests the ops in flight first.
  std::shared_ptr<MpiOp> new_op(const char* kind, size_t bytes, bool async) {
    for (auto& p : inflight_) test(*p);
    auto o = std::make_shared<MpiOp>();
    o->what = fmt::format("{} of {} on {} ranks", kind, format_bytes(bytes), size_);
    o->async = async || !watchdog_.joinable();
    o->timeout = {timeout_s_, "parallel.comm_timeout_s"};
    o->issued = Clock::now();
    return o;
  }
  /// One MPI call of op `o`: call(&request) issues the non-blocking form, call(nullptr) runs the blocking form under
  /// the watchdog. call returns the MPI error code.
  template <class Call>
  void issue(MpiOp& o, Call&& call) {
    int rc = MPI_SUCCESS;
    if (test_error_) {  // test hook (tests/mpi): the first op an invalid MPI call on comm_ (count -1: MPI_ERR_COUNT
                        // from MPI's argument checks, on in Debian's and Ubuntu's Open MPI), so that an MPI error's
                        // path (MPI_ERRORS_RETURN, fatal(), the record) runs as for a real one
      test_error_ = false;
      rc = MPI_Allreduce(MPI_IN_PLACE, nullptr, -1, MPI_BYTE, MPI_BOR, comm_);
    } else if (o.async) {
      MPI_Request r;
      rc = call(&r);
      if (rc == MPI_SUCCESS) o.reqs.push_back(r);
    } else {
      rc = watched(o, [&] { return call(nullptr); });
    }
    if (rc != MPI_SUCCESS) fatal("MPI", o.what.c_str(), __FILE__, __LINE__, mpi_error_string(rc));
  }
  /// Runs the blocking MPI call `call` as op `o`, watched by the watchdog thread when there is one. Returns its code.
  template <class Call>
  int watched(MpiOp& o, Call&& call) {
    if (!watchdog_.joinable()) return call();
    {
      std::lock_guard<std::mutex> lock(wd_mu_);
      wd_op_ = &o;
    }
    const int rc = call();
    std::lock_guard<std::mutex> lock(wd_mu_);
    wd_op_ = nullptr;
    return rc;
  }
  /// A synchronous host-side collective (not timed for busy_ms / spans): issue(call), then complete it.
  template <class Call>
  void host_op(const char* kind, size_t bytes, Call&& call) {
    auto o = new_op(kind, bytes, /*async=*/false);
    o->timed = false;
    o->timeout = host_timeout_;
    issue(*o, call);
    launch(std::move(o));
  }
  template <class T>
  void host_reduce(T* v, size_t n, MPI_Datatype type, HostOp op) {
    if (size_ == 1 || n == 0) return;
    TRAINER_CHECK(n <= size_t(INT_MAX), "all_reduce_host: {} elements exceed MPI's int count", n);
    const MPI_Op mop = op == HostOp::sum ? MPI_SUM : op == HostOp::max ? MPI_MAX : MPI_MIN;
    host_op("all_reduce_host", n * sizeof(T), [&](MPI_Request* r) {
      return r ? MPI_Iallreduce(MPI_IN_PLACE, v, int(n), type, mop, comm_, r)
               : MPI_Allreduce(MPI_IN_PLACE, v, int(n), type, mop, comm_);
    });
  }
  /// The watchdog of blocking calls: aborts the job when one runs past the deadline (needs MPI_THREAD_MULTIPLE).
  void watch() {
    std::unique_lock<std::mutex> lock(wd_mu_);
    while (!wd_stop_) {
      wd_cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (wd_op_ && Clock::now() - wd_op_->issued > std::chrono::duration<double>(wd_op_->timeout.seconds))
        timeout(*wd_op_);
    }
  }
  [[noreturn]] void timeout(const MpiOp& op) const {
    fatal("MPI", op.what.c_str(), __FILE__, __LINE__,
          fmt::format("collective not complete {:.1f} s after it was issued ({} = {} s): "
                      "a rank is stuck, has died or did not call it; aborting all ranks",
                      std::chrono::duration<double>(Clock::now() - op.issued).count(), op.timeout.key,
                      op.timeout.seconds));
  }
  /// A host block holding a copy of `bytes` at device pointer `src` (compute stream synchronised first).
  void* stage_in(MpiOp& o, const void* src, size_t bytes) {
    void* host = stage_out(o, bytes);
    if (bytes) {
      be_.synchronize();
      be_.copy_to_host(host, src, bytes);
    }
    return host;
  }
  /// An uninitialised host block of `bytes`.
  void* stage_out(MpiOp& o, size_t bytes) {
    o.blocks.push_back(pool_.acquire(bytes));
    return o.blocks.back().ptr;
  }
  static void set_copy_back(MpiOp& o, void* dst, const void* src, size_t bytes) {
    o.copy_dst = dst;
    o.copy_src = src;
    o.copy_bytes = bytes;
  }
  void set_avg(MpiOp& o, float* data, int64_t n) const {
    o.scale_data = data;
    o.scale_n = n;
    o.scale = 1.f / float(size_);
  }
  void test(MpiOp& op) {
    if (op.complete) return;
    int flag = 0;
    // (a failed request reports MPI_ERR_IN_STATUS; polling with statuses instead: results/NOTES.md v37)
    MPI_CHECK(MPI_Testall(int(op.reqs.size()), op.reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      op.complete = true;
      op.completed = Clock::now();
    }
  }
  /// Registers an issued collective. A blocking one is complete already and is finished at once (avg scale, copy
  /// back); an asynchronous one is finished by Work::wait().
  std::unique_ptr<Work> launch(std::shared_ptr<MpiOp> o) {
    if (!o->async) {
      o->complete = true;
      o->completed = Clock::now();
    }
    const bool async = o->async;
    inflight_.push_back(o);
    auto w = std::make_unique<MpiWork>(this, std::move(o));
    if (!async) w->wait();
    return w;
  }

  Backend& be_;
  double timeout_s_;
  HostTimeout host_timeout_{timeout_s_, "parallel.comm_timeout_s"};  // the host-side ops' (set_host_timeout)
  bool stage_host_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  StagingPool pool_;
  std::vector<std::shared_ptr<MpiOp>> inflight_;
  // finished ops since reset_busy(): (what, issued, completed), for busy_ms() and spans()
  std::vector<std::tuple<std::string, Clock::time_point, Clock::time_point>> done_;
  Clock::time_point reset_time_;
  // watchdog of blocking calls
  std::thread watchdog_;
  std::mutex wd_mu_;
  std::condition_variable wd_cv_;
  const MpiOp* wd_op_ = nullptr;  // the blocking call in progress (guarded by wd_mu_)
  bool wd_stop_ = false;
  bool test_error_ = false;  // TRAINER_TEST_MPI_ERROR (issue()'s test hook)
};

MpiWork::~MpiWork() {
  if (op_ && !op_->finished) comm_->finish(*op_);
}
void MpiWork::wait() { comm_->finish(*op_); }

}  // namespace

namespace {
/// A private duplicate of MPI_COMM_WORLD whose errors return (every call here is checked and goes through fatal(),
/// which writes the record before the job ends) instead of aborting inside MPI; its splits inherit that.
MPI_Comm world_dup() {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  return c;
}
}  // namespace

size_t staging_pool_bytes(const std::vector<std::vector<size_t>>& ops, std::vector<size_t>* after_each) {
  StagingPool pool(/*pinned=*/false, /*counting=*/true);
  if (after_each) after_each->clear();
  for (const std::vector<size_t>& op : ops) {
    std::vector<Block> held;
    for (size_t bytes : op) held.push_back(pool.acquire(bytes));  // an op holds its blocks together ...
    for (const Block& b : held) pool.release(b);                    // ... and gives them back when it is finished
    if (after_each) after_each->push_back(pool.held_bytes());
  }
  return pool.held_bytes();
}

std::unique_ptr<Communicator> make_mpi_communicator(Backend& be, double timeout_s) {
  return std::make_unique<MpiCommunicator>(be, timeout_s, /*stage_host=*/false, world_dup());
}

std::unique_ptr<Communicator> make_mpi_communicator_staged(Backend& be, double timeout_s) {
  return std::make_unique<MpiCommunicator>(be, timeout_s, /*stage_host=*/true, world_dup());
}

}  // namespace trainer
