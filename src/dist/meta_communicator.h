// MetaCommunicator: rank r of N for the planner's dry run (plan/planner.h). Every collective is a finished no-op that
// only accounts the bytes it would move and a predicted time at a stated bus bandwidth (nccl-tests' busbw
// convention: all_reduce moves 2(N-1)/N of the buffer per rank, reduce_scatter and all_gather (N-1)/N of the full
// buffer, broadcast the buffer). It answers reduce_scatter_in_place() as the communicator the run would use, because
// zero1 allocates differently for NCCL and MPI. No MPI, no NCCL, no device.
#pragma once
#include <string>

#include "dist/communicator.h"

namespace trainer {

class MetaCommunicator final : public Communicator {
 public:
  /// rank of size; `as` the communicator the run would use ("nccl" or "mpi"); bus_bandwidth bytes/s.
  MetaCommunicator(int rank, int size, std::string as, double bus_bandwidth);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "meta:" + as_; }
  std::unique_ptr<Work> all_reduce(Tensor buf, ReduceOp op, bool async = false) override;
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
  /// Every rank is assumed to pass the same colour: a MetaCommunicator of the same rank and size.
  std::unique_ptr<Communicator> split(int color, int key) override;

  /// Bytes this rank would send (busbw convention) and the predicted seconds, since construction or reset_cost().
  double bytes() const { return bytes_; }
  double seconds() const { return seconds_; }
  double bus_bandwidth() const { return bw_; }
  void reset_cost() { bytes_ = seconds_ = 0; }
  /// Bus bandwidth the planner assumes for `comm` ("nccl": NVLink ring ~370 GB/s, shared/ANCHORS.md; "mpi": a
  /// nominal 5 GB/s of host staging and shared memory).
  static double default_bus_bandwidth(const std::string& comm);

 private:
  std::unique_ptr<Work> done(double bytes);

  int rank_, size_;
  std::string as_;
  double bw_;
  double bytes_ = 0, seconds_ = 0;
};

}  // namespace trainer
