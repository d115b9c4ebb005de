#include "dist/meta_communicator.h"

#include <cstring>

namespace trainer {

namespace {
struct DoneWork final : Work {
  void wait() override {}
};
}  // namespace

MetaCommunicator::MetaCommunicator(int rank, int size, std::string as, double bus_bandwidth)
    : rank_(rank), size_(size), as_(std::move(as)), bw_(bus_bandwidth) {
  TRAINER_CHECK(size >= 1 && rank >= 0 && rank < size, "MetaCommunicator: rank {} of {}", rank, size);
  TRAINER_CHECK(bus_bandwidth > 0, "MetaCommunicator: bus bandwidth {} B/s", bus_bandwidth);
}

double MetaCommunicator::default_bus_bandwidth(const std::string& comm) { return comm == "nccl" ? 370e9 : 5e9; }

std::unique_ptr<Work> MetaCommunicator::done(double bytes) {
  if (size_ > 1) {
    bytes_ += bytes;
    seconds_ += bytes / bw_;
  }
  return std::make_unique<DoneWork>();
}

std::unique_ptr<Work> MetaCommunicator::all_reduce(Tensor buf, ReduceOp, bool) {
  return done(2.0 * (size_ - 1) / size_ * double(buf.bytes()));
}

std::unique_ptr<Work> MetaCommunicator::all_reduce_many_via(const std::vector<Tensor>&, const std::vector<Tensor>& wire,
                                                            ReduceOp, bool) {
  double bytes = 0;
  for (const Tensor& w : wire) bytes += 2.0 * (size_ - 1) / size_ * double(w.bytes());
  return done(bytes);
}

std::unique_ptr<Work> MetaCommunicator::reduce_scatter(Tensor, const Tensor& in, ReduceOp, bool) {
  return done(double(size_ - 1) / size_ * double(in.bytes()));
}

std::unique_ptr<Work> MetaCommunicator::all_gather(Tensor out, const Tensor&, bool) {
  return done(double(size_ - 1) / size_ * double(out.bytes()));
}

std::unique_ptr<Work> MetaCommunicator::broadcast(Tensor buf, int, bool) { return done(double(buf.bytes())); }

void MetaCommunicator::all_gather_host(const void* mine, size_t bytes, void* all) {
  for (int r = 0; r < size_; ++r) std::memcpy(static_cast<char*>(all) + size_t(r) * bytes, mine, bytes);
}

std::vector<std::string> MetaCommunicator::gather_host(const std::string& mine, int root) {
  return rank_ == root ? std::vector<std::string>(size_t(size_), mine) : std::vector<std::string>{};
}

std::unique_ptr<Communicator> MetaCommunicator::split(int color, int key) {
  (void)color, (void)key;
  return std::make_unique<MetaCommunicator>(rank_, size_, as_, bw_);
}

}  // namespace trainer
