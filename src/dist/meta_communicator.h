// MetaCommunicator: rank r of N for the planner's dry run (plan/planner.h). Every collective is a no-op that only
// accounts the bytes it would move and a predicted time, latency + bytes / bus bandwidth (nccl-tests' busbw
// convention: all_reduce moves 2(N-1)/N of the buffer per rank, reduce_scatter and all_gather (N-1)/N of the full
// buffer, broadcast the buffer). It answers reduce_scatter_in_place() as the communicator the run would use, because
// zero1 allocates differently for NCCL and MPI. No MPI, no NCCL, no device.
//
// Overlap: with a stream (the meta backend of the dry run) the collectives are placed on a timeline beside the
// compute stream's (MetaBackend::now), as NCCL runs them: on a stream of their own, one after another, each starting
// when it is issued or when the one before it ends, whichever is later. A synchronous collective, and wait() on an
// asynchronous one, hold the compute stream until the collective's end (MetaBackend::wait_until): what the stream
// waits is the exposed communication; the rest ran under the ops issued meanwhile (ddp_overlap's and ddp_bucketed's
// all_reduces under the backward, fsdp's prefetched all_gathers under the blocks before). For "mpi" every collective
// holds the stream at once: Open MPI progresses non-blocking collectives only inside MPI calls, and a device buffer is
// staged after the stream is synchronised (mpi_communicator.cpp). What NCCL's kernels take from the ops they run
// under (SMs, HBM bandwidth) the planner adds after the step: overlap_slowdown() of the time that ran under them
// (plan/planner.cpp).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"

namespace trainer {

class MetaBackend;

class MetaCommunicator final : public Communicator {
 public:
  /// rank of size; `as` the communicator the run would use ("nccl" or "mpi"); bus_bandwidth bytes/s; `stream` the
  /// dry run's backend, whose clock the collectives are placed against (null: every collective is exposed, and
  /// exposed_seconds() equals seconds()). It must outlive this communicator.
  MetaCommunicator(int rank, int size, std::string as, double bus_bandwidth, MetaBackend* stream = nullptr);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "meta:" + as_; }
  std::unique_ptr<Work> all_reduce(Tensor buf, ReduceOp op, bool async = false) override;
  /// One grouped launch with NCCL (one latency for the group), one collective per buffer with MPI.
  std::unique_ptr<Work> all_reduce_many(const std::vector<Tensor>& bufs, ReduceOp op, bool async = false) override;
  std::unique_ptr<Work> all_reduce_many_via(const std::vector<Tensor>& bufs, const std::vector<Tensor>& wire,
                                            ReduceOp op, bool async = false) override;
  std::unique_ptr<Work> reduce_scatter(Tensor out, const Tensor& in, ReduceOp op, bool async = false) override;
  bool reduce_scatter_in_place() const override { return as_ == "nccl"; }
  std::unique_ptr<Work> all_gather(Tensor out, const Tensor& in, bool async = false) override;
  std::unique_ptr<Work> broadcast(Tensor buf, int root, bool async = false) override;
  void barrier() override {}
  // Host collectives: as if every rank held this rank's values (sums and extrema leave them as they are; gathers
  // repeat them), which keeps layout checks and norms of the dry run consistent. They cost nothing.
  void all_reduce_host(double*, size_t, HostOp) override {}
  void all_reduce_host(int64_t*, size_t, HostOp) override {}
  void all_reduce_host(uint64_t*, size_t, HostOp) override {}
  void all_gather_host(const void* mine, size_t bytes, void* all) override;
  void broadcast_host(void*, size_t, int) override {}
  std::vector<std::string> gather_host(const std::string& mine, int root) override;
  /// Every rank is assumed to pass the same colour: a MetaCommunicator of the same rank, size and stream that shares
  /// this one's accounting (its collectives count in bytes() and seconds() here, and queue behind this one's, as on
  /// one NCCL stream).
  std::unique_ptr<Communicator> split(int color, int key) override;

  /// Bytes this rank would send (busbw convention), the collectives' predicted seconds (busy time, overlapped or
  /// not) and the end of the last one on the stream's clock (MetaBackend::now), since construction or reset_cost().
  /// With a stream, reset it together with the backend's (MetaBackend::reset_cost): both clocks restart at 0.
  double bytes() const { return acc_->bytes; }
  double seconds() const { return acc_->seconds; }
  double free_at() const { return acc_->free_at; }
  int64_t collectives() const { return acc_->count; }
  double bus_bandwidth() const { return bw_; }
  double latency() const { return latency_; }
  void reset_cost() { *acc_ = {}; }
  /// Bus bandwidth the planner assumes for `comm` ("nccl": NVLink ring ~370 GB/s, shared/ANCHORS.md; "mpi": a
  /// nominal 5 GB/s of host staging and shared memory).
  static double default_bus_bandwidth(const std::string& comm);
  /// Fixed cost of one collective the planner assumes, seconds ("nccl": 45 us, fitted to small bf16 on two H200s,
  /// v1: ddp_naive's 111 synchronous all_reduces took 4.8-6.5 ms more than ddp_flat's one, the same bytes; "mpi": a
  /// nominal 30 us, a stream synchronisation and a staged copy each way, not measured).
  static double default_latency(const std::string& comm);
  /// How much a collective slows the ops it runs under, per second of it that is hidden ("nccl": 0.55, fitted to xl
  /// bf16 on two H200s, v3: ddp_overlap and ddp_bucketed exposed ~2 ms of their ~40 ms of all_reduce, yet the step
  /// grew by 21.4 ms, as the backward ran beside NCCL's kernels; results/NOTES.md v43. "mpi": 0, nothing overlaps).
  double overlap_slowdown() const { return as_ == "nccl" ? 0.55 : 0.0; }

 private:
  /// Places one collective of `bytes` and `launches` fixed costs on the timeline; synchronous (or mpi): the stream
  /// waits for its end now, asynchronous: the returned Work's wait() makes it wait.
  std::unique_ptr<Work> place(double bytes, int launches, bool async);

  /// What the collectives cost so far; shared with the communicators split() makes.
  struct Accounts {
    double bytes = 0, seconds = 0, free_at = 0;
    int64_t count = 0;
  };

  int rank_, size_;
  std::string as_;
  double bw_, latency_;
  MetaBackend* stream_;
  std::shared_ptr<Accounts> acc_ = std::make_shared<Accounts>();
};

}  // namespace trainer
