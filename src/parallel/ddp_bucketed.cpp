// Strategy "ddp_bucketed": gradients are grouped into buckets of at most parallel.bucket_mb MiB (fp32), filled in
// reverse layout order, which is the order the backward pass produces them (model.h: units L+1 .. 0). A bucket's
// asynchronous all_reduce (sum) is launched as soon as every unit it touches has reported its gradient complete (the
// buckets that one report completes are issued together, as one NCCL group: Communicator::all_reduce_many);
// finish_backward() waits for all buckets. A tensor larger than a bucket forms a bucket of its own.
// (CS336 assignment 2, "DDP bucketed"; PyTorch DDP's bucket_cap_mb, default 25 MiB: fewer, larger collectives than
// ddp_overlap while still overlapping the backward pass.)
//
// The model's flat layout makes each bucket one contiguous range of the gradient buffer, so a bucket is reduced in
// place: no copy in or out. The alignment padding inside a range is zero on every rank and stays zero.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "parallel/data_parallel.h"

namespace trainer {

namespace {

struct Bucket {
  int64_t begin = 0, end = 0;  // flat element range [begin, end) of the gradient buffer
  int64_t numel = 0;           // parameters in it (without padding), elements
  int units = 0;               // distinct units whose gradients it holds
};

class DdpBucketed final : public DdpStrategy {
 public:
  DdpBucketed(const ParallelCfg& parallel, const OptimizerCfg& optimizer, Backend& be, Communicator* comm)
      : DdpStrategy(parallel, optimizer, be, comm, "ddp_bucketed") {}

  void on_unit_ready(int unit) override {
    TRAINER_CHECK(unit >= 0 && unit < int(unit_buckets_.size()), "ddp_bucketed: unit {} outside [0, {})", unit,
                  unit_buckets_.size());
    timer_.touch();
    std::vector<int> ready;
    for (int b : unit_buckets_[size_t(unit)])
      if (--pending_units_[size_t(b)] == 0) ready.push_back(b);
    launch(ready);
  }

  void finish_backward() override {
    timer_.touch();
    std::vector<int> rest(buckets_.size());  // any bucket whose hooks did not all fire
    for (int b = 0; b < int(buckets_.size()); ++b) rest[size_t(b)] = b;
    launch(rest);
    timer_.begin_exposed();
    for (auto& w : works_) w->wait();
    timer_.end_exposed();
    works_.clear();
    for (size_t b = 0; b < buckets_.size(); ++b) {
      pending_units_[b] = buckets_[b].units;
      launched_[b] = false;
    }
    timer_.end_step();
  }

 protected:
  void setup_layout() override {
    const ParamLayout& layout = model_->layout();
    const int64_t cap = std::max<int64_t>(1, int64_t(parallel_.bucket_mb * 1024.0 * 1024.0 / 4.0));
    std::vector<std::vector<int>> bucket_units;  // [bucket] -> units, descending
    bool open = false;
    const auto& params = layout.params();
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const ParamInfo& p = *it;
      if (open && buckets_.back().numel + p.numel > cap) open = false;  // full: the next tensor starts a new one
      if (!open) {
        buckets_.push_back({p.offset, p.offset + p.numel, 0, 0});
        bucket_units.emplace_back();
        open = true;
      }
      Bucket& b = buckets_.back();
      b.begin = p.offset;
      b.numel += p.numel;
      if (bucket_units.back().empty() || bucket_units.back().back() != p.unit) bucket_units.back().push_back(p.unit);
    }
    unit_buckets_.assign(size_t(layout.num_units()), {});
    std::vector<int64_t> desc{cap};
    for (size_t b = 0; b < buckets_.size(); ++b) {
      buckets_[b].units = int(bucket_units[b].size());
      for (int u : bucket_units[b]) unit_buckets_[size_t(u)].push_back(int(b));
      desc.insert(desc.end(), {buckets_[b].begin, buckets_[b].end, buckets_[b].units});
    }
    pending_units_.resize(buckets_.size());
    launched_.assign(buckets_.size(), false);
    for (size_t b = 0; b < buckets_.size(); ++b) pending_units_[b] = buckets_[b].units;
    check_same_layout(comm_, "ddp_bucketed buckets", desc);
    int64_t largest = 0;
    for (const Bucket& b : buckets_) largest = std::max(largest, b.numel);
    spdlog::info("ddp_bucketed: {} buckets (cap {} = {} elements; largest {})", buckets_.size(),
                 format_bytes(size_t(cap) * 4), cap, format_bytes(size_t(largest) * 4));
  }

 private:
  /// One all-reduce per bucket; the buckets completed by one hook are issued together (one NCCL group).
  void launch(const std::vector<int>& bs) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (int b : bs) {
      if (launched_[size_t(b)]) continue;
      launched_[size_t(b)] = true;
      ranges.emplace_back(buckets_[size_t(b)].begin, buckets_[size_t(b)].end);
    }
    if (ranges.empty()) return;
    works_.push_back(reduce(ranges, /*async=*/true));
  }

  std::vector<Bucket> buckets_;                 // in launch order: bucket 0 holds the end of the flat buffer
  std::vector<std::vector<int>> unit_buckets_;  // [unit] -> buckets holding part of its gradients
  std::vector<int> pending_units_;              // [bucket] units not yet reported this step
  std::vector<bool> launched_;                  // [bucket] all-reduce issued this step
  std::vector<std::unique_ptr<Work>> works_;
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_bucketed_strategy(const ParallelCfg& parallel, const OptimizerCfg& optimizer,
                                                     Backend& be, Communicator* comm) {
  return std::make_unique<DdpBucketed>(parallel, optimizer, be, comm);
}

}  // namespace trainer
