// MPI bootstrap: MPI_Init_thread, world and local (per-host) rank, agreement helpers used at start-up, and the world
// communicator chosen by parallel.comm.
#pragma once
#include <mpi.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "config/config.h"
#include "backend/backend.h"
#include "dist/run_context.h"

namespace trainer {

class Communicator;

/// Owns MPI for the process: MPI_Init_thread in the constructor (asks for MPI_THREAD_MULTIPLE), MPI_Finalize in the
/// destructor. Works for a plain single process (singleton init), under mpirun and under srun.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // from MPI_COMM_TYPE_SHARED: picks the GPU
  int local_size() const { return local_size_; }
  int thread_level() const { return thread_level_; }
  /// The start-up agreements below are collectives on MPI_COMM_WORLD that every rank reaches after loading its
  /// config (parallel.startup_timeout_s: how long the ranks may be apart there). They poll (non-blocking MPI) rather
  /// than block: a rank that does not arrive within `timeout_s` of the agreement's start (one that hangs before it,
  /// e.g. on a stalled file system) ends the job through fatal() with a message instead of leaving the others
  /// waiting silently; rank 0 says once, after 30 s, what it is waiting for.
  /// Collective: the lowest rank for which `failed` is true, or -1 if none.
  int first_failing_rank(bool failed, double timeout_s) const;
  /// Collective: the lowest rank whose `text` differs from rank 0's (compared by a 64-bit hash), or -1.
  int first_rank_differing(const std::string& text, double timeout_s) const;
  /// Collective: rank `root`'s `text` (its first 64 KiB) on every rank (e.g. the message of the first rank that
  /// failed, for rank 0 to print).
  std::string text_from(int root, const std::string& text, double timeout_s) const;

  /// Failure notices: a rank > 0 that stops the job on its own (bad input only it found, a run error) tells rank 0,
  /// which may be blocked in a collective that rank will never join, so that rank 0 ends the run's outputs as it
  /// would for its own failure before the job is aborted. They travel on a private duplicate of MPI_COMM_WORLD.
  using FailureHandler = std::function<void(int rank, int code, const std::string& message)>;
  /// Rank 0 of several, with MPI_THREAD_MULTIPLE (else a no-op): starts a thread that polls for notices (every
  /// 20 ms). For each it calls `take(rank)` first: true receives the notice and calls `on_notice` with its (rank, exit
  /// code, message); false leaves it unreceived, for await_ends, and ends the thread (rank 0's main thread has claimed
  /// the end). Runs until stop_listening(). Call once.
  using TakeNotice = std::function<bool(int rank)>;
  void listen_for_failures(TakeNotice take, FailureHandler on_notice);
  /// Stops the listener and joins its thread (not from within `on_notice`). Idempotent.
  void stop_listening();
  /// Rank > 0: sends (exit code, message) to rank 0's listener. Best effort: returns once the send completed or
  /// after 1 s; nothing tells whether rank 0 listens.
  void notify_failure(int code, const std::string& message) const;

  /// The end-of-run agreement (rank 0 writes "ok" only once every rank has ended well). Rank > 0 whose job ended
  /// without a failure (exit code 0, or 4: interrupted): tells rank 0 how the run ended after it, `code` 0 or 4, or
  /// the failure of its own work after the job (exit code and message). Best effort, as notify_failure; the listener
  /// never takes it (await_ends does).
  void report_end(int code, const std::string& message = "") const;
  /// How a rank > 0 ended, as await_ends saw it: its failure (exit code, message), or code -1 for no word.
  struct RankEnd {
    int rank = 0, code = 0;
    std::string message;
  };
  /// Rank 0 of several, at the end of a run whose job it ended without a failure: polls until every rank > 0 has
  /// reported a good end (report_end), or until the first failure (a report_end with another code, or a failure
  /// notice the listener left), for at most `timeout_s`. Returns {} when every rank ended well, that one failure,
  /// or at the timeout the ranks that did not answer (code -1, by rank).
  std::vector<RankEnd> await_ends(double timeout_s) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, thread_level_ = 0;
  MPI_Comm notice_comm_ = MPI_COMM_NULL;  // the notices' duplicate of MPI_COMM_WORLD
  std::thread listener_;
  std::atomic<bool> stop_{false};
};

/// The communicator over all ranks of the run, bound to the backend `be`; there always is one. Strategy "none" (one
/// process) gets an MPI communicator over its one rank (host-side collectives return at once; nothing of NCCL is set
/// up); the other strategies the kind named by cfg.parallel.comm ("mpi" or "nccl"). Raises ConfigError for "none"
/// on several ranks and when the kind is unavailable in this build.
std::unique_ptr<Communicator> make_communicator(const RunConfig& cfg, Backend& be, const RunContext& ctx);

/// The communicator of kind `comm` ("mpi" or "nccl") over all ranks, also for one process (collective_bench).
/// Raises ConfigError naming parallel.comm when the kind is unknown or unavailable (nccl without NCCL or off cuda).
std::unique_ptr<Communicator> make_world_communicator(const std::string& comm, double timeout_s, Backend& be);

}  // namespace trainer
