#include "jobs/train_step.h"

#include <cmath>

namespace trainer {

void begin_train_step(Strategy& strategy, const StepShape& s, double lr) { strategy.begin_step(lr, s.optimizer); }

void enqueue_train_step(Backend& be, Model& model, Strategy& strategy, const StepShape& s, double lr,
                        std::optional<double> max_grad_norm, const StepEvents& ev) {
  auto mark = [&be](Event* e) {
    if (e) be.record(*e);
  };
  auto mark_at = [&mark](const std::vector<Event*>& v, int i) {
    if (size_t(i) < v.size()) mark(v[size_t(i)]);
  };
  mark(ev.start);
  if (s.backward) model.zero_grads();
  for (int m = 0; m < s.n_micro; ++m) {
    strategy.begin_microbatch(m, s.n_micro);
    const int64_t off = int64_t(m) * s.micro * s.seq_len;
    {
      ScopedRange range(be, "forward", "phase", m);
      model.forward(off, s.micro, s.seq_len, s.backward, float(1.0 / double(s.global_tokens)));
    }
    mark_at(ev.forward_end, m);
    if (s.backward) {
      ScopedRange range(be, "backward", "phase", m);
      model.backward();
    }
    mark_at(ev.backward_end, m);
  }
  if (s.backward) {
    ScopedRange range(be, "finish_backward", "phase");
    strategy.finish_backward();
  }
  mark(ev.comm_end);
  if (s.optimizer) {
    ScopedRange range(be, "optimizer", "phase");
    strategy.clipped_optimizer_step(lr, max_grad_norm);  // the norm: strategy.step_grad_norm()
  }
  mark(ev.optimizer_end);
}

double train_step(Backend& be, Model& model, Strategy& strategy, const StepShape& s, double lr,
                  std::optional<double> max_grad_norm, const StepEvents& ev) {
  begin_train_step(strategy, s, lr);
  enqueue_train_step(be, model, strategy, s, lr, max_grad_norm, ev);
  return s.optimizer ? strategy.step_grad_norm() : std::nan("");
}

}  // namespace trainer
