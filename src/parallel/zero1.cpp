// Strategy "zero1": optimizer state sharding (ZeRO stage 1: Rajbhandari et al., "ZeRO: Memory Optimizations Toward
// Training Trillion Parameter Models", SC 2020, Sec. 5.1; CS336 assignment 2, "optimizer state sharding").
//
// The flat buffer [flat_size] (padded by the model to a multiple of kAlign * world_size) is cut into N equal chunks
// of flat_size / N elements; rank r owns chunk r: its AdamW state (m, v) and the update of its parameters. Equal
// chunks balance the state by size to within the alignment padding, whatever the parameter count is. A chunk boundary
// may fall inside a tensor; AdamW is elementwise, so that does not matter.
//
// Per step:
//   finish_backward: reduce_scatter (sum) of the flat gradient -> this rank's reduced chunk [chunk]. With NCCL the
//                    chunk is reduced in place, into this rank's own slot of the flat gradient buffer (NCCL allows
//                    recvbuff = sendbuff + rank * recvcount), so no second gradient buffer exists; with MPI (whose
//                    in-place reduce-scatter puts the result at the buffer's start) it is a separate buffer,
//                    Category::gradients;
//   grad_norm:       sqrt(sum over ranks of the chunk's sum of squares), summed in fp64 (all_reduce_host): the
//                    global norm over all shards, the same value as one process;
//   optimizer_step:  AdamW on the owned chunk only, then an in-place all_gather so every rank holds all updated
//                    weights. fp32: of the parameter chunks. Mixed precision (as in the paper, Sec. 5.1 and 6: the
//                    fp32 master weights are part of the partitioned optimizer state): AdamW writes the chunk's bf16
//                    working copy in its own pass and the bf16 copy is gathered (half the bytes, no separate cast);
//                    the other chunks of the fp32 master stay stale until gather_params() (checkpoints).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "parallel/data_parallel.h"

namespace trainer {

namespace {
class Zero1 final : public Strategy {
 public:
  Zero1(const OptimizerCfg& optimizer, Backend& be, Communicator* comm)
      : optimizer_(optimizer), be_(be), comm_(checked(comm)), timer_(be, *comm) {}
  std::string name() const override { return "zero1"; }

  void setup(Model& model) override {
    model_ = &model;
    const int n = comm_.size();
    TRAINER_CHECK(model.flat_size() % n == 0,
                  "zero1: flat buffer of {} elements does not split into {} equal chunks (construct the Model with "
                  "flat_multiple = kAlign * world_size)", model.flat_size(), n);
    chunk_ = model.flat_size() / n;
    begin_ = chunk_ * comm_.rank();
    broadcast_weights(model, comm_);
    adamw_ = std::make_unique<AdamW>(be_, chunk_, optimizer_);
    in_place_ = comm_.reduce_scatter_in_place();
    check_same_layout(comm_, "zero1 shards", {model.flat_size(), n, chunk_});
    spdlog::info("zero1: {} shards of {} elements; AdamW state {} per rank (one process: {})", n, chunk_,
                 format_bytes(adamw_->full_state_bytes()), format_bytes(size_t(model.flat_size()) * 8));
  }

  void finish_backward() override {
    // MPI's reduce-scatter is not in place: the chunk lands in a shard of its own, made at the first backward (a
    // forward-only run has none)
    if (!in_place_ && !grad_shard_) grad_shard_ = be_.alloc(size_t(chunk_) * 4, Category::gradients);
    timer_.begin_step();
    timer_.begin_exposed();
    comm_.reduce_scatter(shard(), model_->grads(), ReduceOp::sum);
    timer_.end_exposed();
  }

  void begin_step(double lr, bool optimizer) override {
    if (optimizer) adamw_->begin_step(lr);  // AdamW's step values to the device, before the step's work
  }

  double grad_norm() override {
    double total = be_.sum_squares(shard());
    comm_.all_reduce_host(&total, 1, HostOp::sum);  // host-side: in neither comm nor comm_exposed (CommTimer)
    return std::sqrt(total);
  }

  void optimizer_step(double lr, double grad_scale, bool want_norm) override {
    const Tensor params = model_->params();
    const Tensor mine = params.slice(begin_, {chunk_});
    const bool mixed = model_->act_dtype() != DType::f32;
    const Tensor work = model_->params_work();
    const Tensor work_mine = mixed ? work.slice(begin_, {chunk_}) : Tensor();
    (void)lr;  // begin_step uploaded it
    const double local = adamw_->update(mine, shard(), work_mine, grad_scale, want_norm);
    double total = std::nan("");
    if (want_norm) {
      total = local;
      comm_.all_reduce_host(&total, 1, HostOp::sum);
      total = std::sqrt(total);
    }
    timer_.begin_exposed();
    if (mixed)
      comm_.all_gather(work, work_mine);  // in place: this rank's chunk is already in its slot
    else
      comm_.all_gather(params, mine);
    timer_.end_exposed();
    timer_.end_step();
    step_norm_ = total;
  }

  void gather_params() override {
    if (model_->act_dtype() == DType::f32) return;  // the fp32 gather in every step already did it
    const Tensor params = model_->params();
    comm_.all_gather(params, params.slice(begin_, {chunk_}));
  }

  size_t optimizer_state_bytes() const override { return adamw_ ? adamw_->state_bytes() : 0; }
  /// Chunk [begin, begin + chunk) of the flat buffer, less the padding past the layout's end.
  OptimizerState optimizer_state() override {
    const int64_t n = std::max<int64_t>(0, std::min(chunk_, model_->layout().total() - begin_));
    return {adamw_->state_tensors(), {{begin_, 0, n}}, false, adamw_.get()};
  }
  double comm_ms() const override { return timer_.comm_ms(); }
  double comm_exposed_ms() const override { return timer_.exposed_ms(); }

 private:
  static Communicator& checked(Communicator* comm) {
    CONFIG_CHECK(comm != nullptr, "parallel.strategy: 'zero1' needs a communicator (parallel.comm)");
    return *comm;
  }
  Tensor shard() const {
    return in_place_ ? model_->grads().slice(begin_, {chunk_}) : grad_shard_.view(DType::f32, {chunk_});
  }

  const OptimizerCfg optimizer_;  // the config section this strategy reads (a copy)
  Backend& be_;
  Communicator& comm_;
  CommTimer timer_;
  Model* model_ = nullptr;
  int64_t chunk_ = 0, begin_ = 0;  // elements per shard; this rank's first element
  std::unique_ptr<AdamW> adamw_;   // m, v [chunk]
  bool in_place_ = false;          // the reduced chunk lives in the flat gradient buffer (comm allows it: NCCL)
  Buffer grad_shard_;              // f32 [chunk]: this rank's reduced gradient chunk (MPI)
};
}  // namespace

std::unique_ptr<Strategy> make_zero1_strategy(const ParallelCfg&, const OptimizerCfg& optimizer, Backend& be,
                                              Communicator* comm) {
  return std::make_unique<Zero1>(optimizer, be, comm);
}

}  // namespace trainer
