// MpiCommunicator: collectives over MPI (a duplicate of MPI_COMM_WORLD, so they never mix with the host-side
// MPI_Allreduce calls of the train loop).
//
// Buffers: a host tensor (Device::cpu) is handed to MPI as is. A device tensor (Device::cuda) is staged: the compute
// stream is synchronised, the data copied into a pinned host block (Backend::copy_to_host), the collective runs on
// that block, and Work::wait() copies the result back (Backend::copy_from_host). Pinned blocks are cached, so a
// steady-state step allocates nothing. (They are host memory and not counted in the device pool's categories.)
//
// Asynchrony: every collective is issued as MPI_I* (non-blocking); a synchronous call is the same followed by wait().
// wait() polls MPI_Testall until the collective completes or parallel.comm_timeout_s has passed since it was
// issued; on timeout it calls fatal(), which prints one message naming the collective and MPI_Aborts every rank.
// Open MPI progresses non-blocking collectives only inside MPI calls, so issuing a collective also tests the ones
// still in flight: that makes them progress during backward (ddp_overlap) and dates their completion for busy_ms().
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
#include <thread>
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

/// Host memory for staging device buffers: pinned (cudaHostAlloc) in CUDA builds, so copies run at full link rate;
/// 64-byte aligned malloc otherwise. Freed blocks are kept and reused (best fit by size).
class StagingPool {
 public:
  StagingPool() = default;
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
    return alloc_block(std::max<size_t>(bytes, 64));
  }
  void release(Block b) { free_.push_back(b); }

 private:
  static Block alloc_block(size_t bytes) {
    Block b{nullptr, bytes};
#ifdef TRAINER_HAVE_CUDA
    const cudaError_t st = cudaHostAlloc(&b.ptr, bytes, cudaHostAllocPortable);
    if (st != cudaSuccess)
      throw OutOfMemory(fmt::format("mpi communicator: pinned host staging buffer of {} failed: {}",
                                    format_bytes(bytes), cudaGetErrorString(st)));
#else
    b.ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!b.ptr)
      throw OutOfMemory(fmt::format("mpi communicator: host staging buffer of {} failed", format_bytes(bytes)));
#endif
    return b;
  }
  static void free_block(Block& b) {
#ifdef TRAINER_HAVE_CUDA
    cudaFreeHost(b.ptr);
#else
    std::free(b.ptr);
#endif
    b.ptr = nullptr;
  }
  std::vector<Block> free_;
};

// ---- one collective in flight --------------------------------------------------------------------------------------

struct MpiOp {
  std::string what;                 // "all_reduce of 4 MiB (f32)", for the timeout message
  std::vector<MPI_Request> reqs;    // one per piece
  Clock::time_point issued, completed;
  bool complete = false;            // MPI reports every request done
  bool finished = false;            // post-processing done (avg scale, copy back) and staging released
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
  MpiCommunicator(Backend& be, double timeout_s, bool stage_host)
      : be_(be), timeout_s_(timeout_s), stage_host_(stage_host) {
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    reset_time_ = Clock::now();
  }
  ~MpiCommunicator() override {
    while (!inflight_.empty()) finish(*inflight_.front());
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
    auto o = new_op("all_reduce", buf.bytes());
    float* data = buf.ptr<float>();
    if (staged(buf)) {
      data = static_cast<float*>(stage_in(*o, buf.data, buf.bytes()));
      set_copy_back(*o, buf.data, data, buf.bytes());
    }
    if (op == ReduceOp::avg) set_avg(*o, data, n);
    for (int64_t off = 0; off < n; off += kMaxPiece) {
      MPI_Request r;
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, int(std::min(kMaxPiece, n - off)), MPI_FLOAT, MPI_SUM,
                               comm_, &r));
      o->reqs.push_back(r);
    }
    return launch(std::move(o), async);
  }

  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op, bool async) override {
    check_f32(out, "reduce_scatter: out");
    check_f32(in, "reduce_scatter: in");
    const int64_t n = out.numel();
    TRAINER_CHECK(in.numel() == n * size_, "reduce_scatter: in has {} elements, expected {} ranks x {}", in.numel(),
                  size_, n);
    TRAINER_CHECK(n <= INT_MAX, "reduce_scatter: {} elements per rank exceed MPI's int count", n);
    auto o = new_op("reduce_scatter", in.bytes());
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
    MPI_Request r;
    MPI_CHECK(MPI_Ireduce_scatter_block(src, dst, int(n), MPI_FLOAT, MPI_SUM, comm_, &r));
    o->reqs.push_back(r);
    return launch(std::move(o), async);
  }

  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in, bool async) override {
    check_f32(out, "all_gather: out");
    check_f32(in, "all_gather: in");
    const int64_t n = in.numel();
    TRAINER_CHECK(out.numel() == n * size_, "all_gather: out has {} elements, expected {} ranks x {}", out.numel(),
                  size_, n);
    TRAINER_CHECK(n <= INT_MAX, "all_gather: {} elements per rank exceed MPI's int count", n);
    auto o = new_op("all_gather", out.bytes());
    float* dst = out.ptr<float>();
    const bool in_place = in.data == static_cast<void*>(dst + rank_ * n);
    if (staged(out) || staged(in)) {
      // Stage as an in-place gather: this rank's piece goes straight to its slot of the host block.
      dst = static_cast<float*>(stage_out(*o, out.bytes()));
      if (n > 0) {
        be_.synchronize();
        be_.copy_to_host(dst + rank_ * n, in.data, in.bytes());
      }
      set_copy_back(*o, out.data, dst, out.bytes());
    } else if (!in_place) {
      TRAINER_CHECK(!overlap(in.data, in.bytes(), out.data, out.bytes()),
                    "all_gather: in overlaps out other than as out's own slot (in place)");
      std::copy_n(in.ptr<float>(), n, dst + rank_ * n);  // then gather in place: one code path
    }
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, int(n), MPI_FLOAT, comm_, &r));
    o->reqs.push_back(r);
    return launch(std::move(o), async);
  }

  std::unique_ptr<Work> broadcast(Tensor buf, int root, bool async) override {
    check_f32(buf, "broadcast: buf");
    TRAINER_CHECK(root >= 0 && root < size_, "broadcast: root {} outside [0, {})", root, size_);
    const int64_t n = buf.numel();
    auto o = new_op("broadcast", buf.bytes());
    float* data = buf.ptr<float>();
    if (staged(buf)) {
      data = static_cast<float*>(rank_ == root ? stage_in(*o, buf.data, buf.bytes()) : stage_out(*o, buf.bytes()));
      if (rank_ != root) set_copy_back(*o, buf.data, data, buf.bytes());
    }
    for (int64_t off = 0; off < n; off += kMaxPiece) {
      MPI_Request r;
      MPI_CHECK(MPI_Ibcast(data + off, int(std::min(kMaxPiece, n - off)), MPI_FLOAT, root, comm_, &r));
      o->reqs.push_back(r);
    }
    return launch(std::move(o), async);
  }

  void barrier() override {
    auto o = new_op("barrier", 0);
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(comm_, &r));
    o->reqs.push_back(r);
    launch(std::move(o), /*async=*/false);
  }

  /// Host ms during which at least one collective was in flight (union of [issue, completion observed]) since the
  /// last reset_busy(); collectives still in flight are not counted yet.
  double busy_ms() const override {
    auto iv = busy_;
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
  void reset_busy() override {
    busy_.clear();
    reset_time_ = Clock::now();
  }

  /// Completes `op`: polls until MPI reports it done (fatal() after the timeout), then applies the avg scale and
  /// copies a staged result back to the device, and gives the staging blocks back. Idempotent.
  void finish(MpiOp& op) {
    if (op.finished) return;
    const auto deadline = op.issued + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(timeout_s_));
    const auto wait_start = Clock::now();
    for (int spin = 0; !op.complete; ++spin) {
      test(op);
      if (op.complete) break;
      const auto now = Clock::now();
      if (now > deadline) {
        fatal("MPI", op.what.c_str(), __FILE__, __LINE__,
              fmt::format("collective not complete {:.1f} s after it was issued (parallel.comm_timeout_s = {} s): "
                          "a rank is stuck, has died or did not call it; aborting all ranks",
                          std::chrono::duration<double>(now - op.issued).count(), timeout_s_));
      }
      // Spin briefly for latency, then give the core away (ranks may outnumber cores, as in CI).
      if (now - wait_start > std::chrono::milliseconds(2))
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (spin > 64)
        std::this_thread::yield();
    }
    if (op.scale_data)
      for (int64_t i = 0; i < op.scale_n; ++i) op.scale_data[i] *= op.scale;
    if (op.copy_bytes) be_.copy_from_host(op.copy_dst, op.copy_src, op.copy_bytes);
    for (Block& b : op.blocks) pool_.release(b);
    op.blocks.clear();
    op.finished = true;
    busy_.emplace_back(op.issued, op.completed);
    inflight_.erase(std::remove_if(inflight_.begin(), inflight_.end(),
                                   [&](const std::shared_ptr<MpiOp>& p) { return p.get() == &op; }),
                    inflight_.end());
  }

 private:
  void check_f32(const Tensor& t, const char* what) const {
    TRAINER_CHECK(t.dtype == DType::f32, "mpi communicator: {} has dtype {}, expected f32", what,
                  dtype_name(t.dtype));
    TRAINER_CHECK(t.device == Device::cpu || be_.device() == t.device,
                  "mpi communicator: {} lives on a device the backend '{}' cannot copy from", what, be_.name());
  }
  bool staged(const Tensor& t) const { return stage_host_ || t.device != Device::cpu; }

  std::shared_ptr<MpiOp> new_op(const char* kind, size_t bytes) const {
    auto o = std::make_shared<MpiOp>();
    o->what = fmt::format("{} of {} (f32) on {} ranks", kind, format_bytes(bytes), size_);
    return o;
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
    MPI_CHECK(MPI_Testall(int(op.reqs.size()), op.reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) {
      op.complete = true;
      op.completed = Clock::now();
    }
  }
  /// Registers a just-issued collective (after testing the ones in flight) and waits for it unless async.
  std::unique_ptr<Work> launch(std::shared_ptr<MpiOp> o, bool async) {
    o->issued = Clock::now();
    for (auto& p : inflight_) test(*p);
    inflight_.push_back(o);
    auto w = std::make_unique<MpiWork>(this, std::move(o));
    if (!async) w->wait();
    return w;
  }

  Backend& be_;
  double timeout_s_;
  bool stage_host_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  StagingPool pool_;
  std::vector<std::shared_ptr<MpiOp>> inflight_;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> busy_;  // [issued, completed] of finished ops
  Clock::time_point reset_time_;
};

MpiWork::~MpiWork() {
  if (op_ && !op_->finished) comm_->finish(*op_);
}
void MpiWork::wait() { comm_->finish(*op_); }

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(Backend& be, double timeout_s) {
  return std::make_unique<MpiCommunicator>(be, timeout_s, /*stage_host=*/false);
}

std::unique_ptr<Communicator> make_mpi_communicator_staged(Backend& be, double timeout_s) {
  return std::make_unique<MpiCommunicator>(be, timeout_s, /*stage_host=*/true);
}

}  // namespace trainer
