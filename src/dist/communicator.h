// Communicator: process-group style collectives over contiguous f32 buffers (DESIGN.md "Communicator interface").
//
// Implementations: MPI (host buffers; device buffers staged through pinned host memory, so CPU-only runs and several
// ranks sharing one GPU work) and NCCL (device buffers, its own stream ordered after the compute stream with events).
// Every call can be synchronous (returns a finished Work) or asynchronous (wait() before touching the buffer).
// A collective that does not finish within comm_timeout_s aborts every rank with a message; it never hangs silently.
//
// The Communicator is the only road between ranks: besides the tensor collectives it carries the small host-side ones
// (scalars, layout hashes, per-rank statistics, trace text) and makes subgroup communicators (split). The host-side
// collectives are synchronous, run over MPI in both implementations (NCCL keeps an MPI communicator over the same
// ranks), have the same timeout (or a longer one for a scope: set_host_timeout), and are not counted in busy_ms() /
// spans(). On one rank they return at once. Two exchanges run before or beside any Communicator, on MPI_COMM_WORLD and
// a private duplicate of it (dist/bootstrap.h, MpiSession): the start-up agreement (first_failing_rank: which rank's
// config failed; first_rank_differing: a broadcast of rank 0's config hash; before a job makes its Communicator), and
// the failure / end notices a rank > 0 sends rank 0 point to point, which must work while the job's Communicator is
// stuck or gone.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/errors.h"

namespace trainer {

enum class ReduceOp { sum, avg };

/// Reductions of the host-side collectives (all_reduce_host).
enum class HostOp { sum, max, min };

/// How long a host-side collective waits for the other ranks (seconds) and the config key that set it, which a
/// timeout's message names.
struct HostTimeout {
  double seconds;
  const char* key;
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;  // blocks the host until done (MPI) or orders the compute stream after it (NCCL)
};

/// Several Works as one: wait() waits for each, in order.
class WorkList final : public Work {
 public:
  explicit WorkList(std::vector<std::unique_ptr<Work>> works) : works_(std::move(works)) {}
  void wait() override {
    for (auto& w : works_) w->wait();
  }

 private:
  std::vector<std::unique_ptr<Work>> works_;
};

/// One collective, for traces: what it was and when it ran, in ms after an origin (see Communicator::spans).
struct CommSpan {
  std::string what;
  double start_ms, end_ms;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  /// In place: buf = op over ranks of buf. f32 (nccl: also bf16).
  virtual std::unique_ptr<Work> all_reduce(Tensor buf, ReduceOp op, bool async = false) = 0;
  /// all_reduce of each of `bufs`, issued together: one operation for waiting and timing. NCCL launches them as one
  /// group (ncclGroupStart/End: one kernel, no per-collective launch latency); this default issues them in turn
  /// (one buffer: exactly all_reduce, so a synchronous call stays a blocking collective).
  virtual std::unique_ptr<Work> all_reduce_many(const std::vector<Tensor>& bufs, ReduceOp op, bool async = false) {
    if (bufs.size() == 1) return all_reduce(bufs[0], op, async);
    std::vector<std::unique_ptr<Work>> works;
    works.reserve(bufs.size());
    for (const Tensor& b : bufs) works.push_back(all_reduce(b, op, /*async=*/true));
    auto w = std::make_unique<WorkList>(std::move(works));
    if (!async) w->wait();
    return w;
  }
  /// all_reduce_many with the sums carried in a narrower dtype: each f32 bufs[i] is cast into wire[i] (bf16, same
  /// element count), the wire tensors are summed over ranks, and the sums are cast back into bufs[i]. The casts run
  /// where the collective runs (NCCL: on the communicator's stream, beside the compute stream's kernels; they still
  /// take SMs and memory bandwidth from it). Each rank's values are rounded to bf16, and so is every partial sum the
  /// collective forms (NCCL's ring: error grows with the number of ranks); PyTorch DDP's bf16_compress_hook.
  /// Raises RuntimeError where unsupported (MPI has no bf16 sum).
  virtual std::unique_ptr<Work> all_reduce_many_via(const std::vector<Tensor>& bufs, const std::vector<Tensor>& wire,
                                                    ReduceOp op, bool async = false) {
    (void)bufs, (void)wire, (void)op, (void)async;
    TRAINER_CHECK(false, "{} communicator: all_reduce in bf16 is not supported (use comm nccl)", name());
    return nullptr;
  }
  /// out [n] = op over ranks of in[rank*n : (rank+1)*n]; in has size()*n elements. out may be in's own slot
  /// (in + rank*n) only where reduce_scatter_in_place() says so.
  virtual std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op, bool async = false) = 0;
  /// True when reduce_scatter accepts out == in + rank*n (NCCL does; MPI's in-place form puts the result elsewhere).
  virtual bool reduce_scatter_in_place() const { return false; }
  /// out [size()*n] = concatenation over ranks of in [n]. Any dtype (out and in alike): it only moves bytes.
  virtual std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in, bool async = false) = 0;
  /// buf = root's buf.
  virtual std::unique_ptr<Work> broadcast(Tensor buf, int root, bool async = false) = 0;
  /// Host-side barrier among the ranks.
  virtual void barrier() = 0;

  // ---- host-side collectives (synchronous; host memory; MPI underneath in every implementation) ----------------
  /// In place: v[i] = op over ranks of v[i], i < n. Elementwise, so a vector of per-step values gives per-step maxima.
  virtual void all_reduce_host(double* v, size_t n, HostOp op) = 0;
  virtual void all_reduce_host(int64_t* v, size_t n, HostOp op) = 0;
  virtual void all_reduce_host(uint64_t* v, size_t n, HostOp op) = 0;
  /// all [size() * bytes] = concatenation over ranks of mine [bytes] (the same `bytes` on every rank; raw bytes).
  virtual void all_gather_host(const void* mine, size_t bytes, void* all) = 0;
  /// data [bytes] = root's data [bytes].
  virtual void broadcast_host(void* data, size_t bytes, int root) = 0;
  /// Variable-size gather: on `root`, every rank's `mine` in rank order; on the other ranks, an empty vector.
  /// RuntimeError when the strings together exceed 2 GiB (MPI's int displacements).
  virtual std::vector<std::string> gather_host(const std::string& mine, int root) = 0;
  /// The host-side collectives and barrier() issued from now on wait up to `t` instead of parallel.comm_timeout_s;
  /// returns the setting it replaces. For waits that span one rank's long I/O (a checkpoint's writes, where rank 0
  /// writes the weights alone, and reads: parallel.checkpoint_timeout_s); set it through ScopedHostTimeout. The tensor
  /// collectives keep comm_timeout_s; a split() starts from comm_timeout_s. No effect where nothing waits (one rank).
  virtual HostTimeout set_host_timeout(HostTimeout t) { return t; }

  /// Collective: the ranks passing the same `color` (>= 0) form a new communicator of the same kind, ranked by `key`
  /// (ties by rank here), with this one's timeout. MPI: MPI_Comm_split; NCCL: ncclCommSplit (NCCL >= 2.18, else
  /// RuntimeError) plus the MPI split for its host-side collectives. The result must not outlive this communicator
  /// (NCCL: it shares the compute stream; both: the backend).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  /// Milliseconds spent inside collectives (issue to completion) since the last reset.
  virtual double busy_ms() const { return 0; }
  virtual void reset_busy() {}
  /// The collectives finished since the last reset_busy(), timed against `origin` (an event recorded on the
  /// backend's compute stream before them: NCCL times its own stream's events against it) or, for communicators
  /// timed by the host clock (MPI), against `host_origin`. Syncs on the collectives' end.
  virtual std::vector<CommSpan> spans(Event& origin, std::chrono::steady_clock::time_point host_origin) const {
    (void)origin;
    (void)host_origin;
    return {};
  }
};

/// The communicator's host-side timeout set to `t` for this object's lifetime (Communicator::set_host_timeout).
class ScopedHostTimeout {
 public:
  ScopedHostTimeout(Communicator& comm, HostTimeout t) : comm_(comm), previous_(comm.set_host_timeout(t)) {}
  ~ScopedHostTimeout() { comm_.set_host_timeout(previous_); }
  ScopedHostTimeout(const ScopedHostTimeout&) = delete;
  ScopedHostTimeout& operator=(const ScopedHostTimeout&) = delete;

 private:
  Communicator& comm_;
  HostTimeout previous_;
};

/// A failure of one rank in a step every rank does on its own (reading a file, writing a checkpoint's files).
struct RankFailure {
  int rank = -1;        // the first (lowest) rank that ran out of memory, else the first that failed
  bool oom = false;     // its failure was out of memory (so some rank's was: every rank ends as out of memory)
  std::string message;  // its error message (on every rank)
};

/// Whether any rank failed the step that precedes this call, agreed so that every rank ends alike instead of some going
/// on to a collective that the failed ones never join (collective: every rank calls it at the same point, whatever its
/// own outcome). `error`: this rank's failure, "" where it succeeded; `oom`: it was out of memory. Returns std::nullopt
/// on every rank when none failed, else on every rank the failure every rank ends with: the first rank out of memory's
/// where some rank ran out of memory (one status, oom, and a message that says so), else the first failed rank's. Each
/// caller then throws, its own error where it failed alike. One all_gather_host of a byte a rank; where some rank
/// failed, two broadcasts from it (the message's length, then the message).
std::optional<RankFailure> first_failure(Communicator& comm, const std::string& error, bool oom);

}  // namespace trainer
