#include "dist/meta_communicator.h"

#include <algorithm>
#include <cstring>

#include "backend/meta/meta_backend.h"

namespace trainer {

namespace {
/// An asynchronous collective's handle: wait() holds the stream until its end (nothing without a stream).
struct PlacedWork final : Work {
  MetaBackend* stream;
  double end;
  PlacedWork(MetaBackend* s, double e) : stream(s), end(e) {}
  void wait() override {
    if (stream) stream->wait_until(end);
  }
};
}  // namespace

MetaCommunicator::MetaCommunicator(int rank, int size, std::string as, double bus_bandwidth, MetaBackend* stream)
    : rank_(rank), size_(size), as_(std::move(as)), bw_(bus_bandwidth), latency_(default_latency(as_)),
      stream_(stream) {
  TRAINER_CHECK(size >= 1 && rank >= 0 && rank < size, "MetaCommunicator: rank {} of {}", rank, size);
  TRAINER_CHECK(bus_bandwidth > 0, "MetaCommunicator: bus bandwidth {} B/s", bus_bandwidth);
}

double MetaCommunicator::default_bus_bandwidth(const std::string& comm) { return comm == "nccl" ? 370e9 : 5e9; }
double MetaCommunicator::default_latency(const std::string& comm) { return comm == "nccl" ? 45e-6 : 30e-6; }

std::unique_ptr<Work> MetaCommunicator::place(double bytes, int launches, bool async) {
  if (size_ == 1) return std::make_unique<PlacedWork>(nullptr, 0.0);  // one rank: the communicators return at once
  const double t = launches * latency_ + bytes / bw_;
  Accounts& a = *acc_;
  a.bytes += bytes;
  a.seconds += t;
  a.count += launches;
  if (!stream_) {  // no timeline: in sequence with everything
    a.free_at += t;
    return std::make_unique<PlacedWork>(nullptr, a.free_at);
  }
  a.free_at = std::max(a.free_at, stream_->now()) + t;
  auto w = std::make_unique<PlacedWork>(stream_, a.free_at);
  if (!async || as_ != "nccl") w->wait();
  return w;
}

std::unique_ptr<Work> MetaCommunicator::all_reduce(Tensor buf, ReduceOp, bool async) {
  return place(2.0 * (size_ - 1) / size_ * double(buf.bytes()), 1, async);
}

std::unique_ptr<Work> MetaCommunicator::all_reduce_many(const std::vector<Tensor>& bufs, ReduceOp, bool async) {
  double bytes = 0;
  for (const Tensor& b : bufs) bytes += 2.0 * (size_ - 1) / size_ * double(b.bytes());
  return place(bytes, as_ == "nccl" ? 1 : int(bufs.size()), async);
}

std::unique_ptr<Work> MetaCommunicator::all_reduce_many_via(const std::vector<Tensor>& bufs,
                                                            const std::vector<Tensor>& wire, ReduceOp, bool async) {
  double bytes = 0;
  for (const Tensor& w : wire) bytes += 2.0 * (size_ - 1) / size_ * double(w.bytes());
  // The casts into the wire dtype and back (12 bytes an f32 element) run on NCCL's stream in a run
  // (nccl_communicator.cpp), memory-bound beside memory- and compute-bound ops: charged to the compute stream in full,
  // as if they ran there (v4 on two H200s: bf16 on the wire was 3.3 ms slower than f32 at xl, not faster)
  if (stream_ && size_ > 1)
    for (size_t i = 0; i < bufs.size() && i < wire.size(); ++i) {
      stream_->cast(wire[i], bufs[i]);
      stream_->cast(bufs[i], wire[i]);
    }
  return place(bytes, 1, async);  // NCCL only (MPI has no bf16 sum): one group
}

std::unique_ptr<Work> MetaCommunicator::reduce_scatter(Tensor, const Tensor& in, ReduceOp, bool async) {
  return place(double(size_ - 1) / size_ * double(in.bytes()), 1, async);
}

std::unique_ptr<Work> MetaCommunicator::all_gather(Tensor out, const Tensor&, bool async) {
  return place(double(size_ - 1) / size_ * double(out.bytes()), 1, async);
}

std::unique_ptr<Work> MetaCommunicator::broadcast(Tensor buf, int, bool async) {
  return place(double(buf.bytes()), 1, async);
}

void MetaCommunicator::all_gather_host(const void* mine, size_t bytes, void* all) {
  for (int r = 0; r < size_; ++r) std::memcpy(static_cast<char*>(all) + size_t(r) * bytes, mine, bytes);
}

std::vector<std::string> MetaCommunicator::gather_host(const std::string& mine, int root) {
  return rank_ == root ? std::vector<std::string>(size_t(size_), mine) : std::vector<std::string>{};
}

std::unique_ptr<Communicator> MetaCommunicator::split(int color, int key) {
  (void)color, (void)key;
  auto c = std::make_unique<MetaCommunicator>(rank_, size_, as_, bw_, stream_);
  c->acc_ = acc_;
  return c;
}

}  // namespace trainer
