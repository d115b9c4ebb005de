#include "jobs/train_step.h"

#include <cmath>

#include "optim/schedule.h"

namespace trainer {

double train_step(Backend& be, Model& model, Strategy& strategy, const StepShape& s, double lr,
                  std::optional<double> max_grad_norm, const StepEvents& ev) {
  auto mark = [&be](Event* e) {
    if (e) be.record(*e);
  };
  auto mark_at = [&mark](const std::vector<Event*>& v, int i) {
    if (size_t(i) < v.size()) mark(v[size_t(i)]);
  };
  mark(ev.start);
  strategy.begin_step(lr, s.optimizer);
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
  double gnorm = std::nan("");
  if (s.optimizer) {
    ScopedRange range(be, "optimizer", "phase");
    if (max_grad_norm) {  // the clip factor is needed before the update: a separate pass
      gnorm = strategy.grad_norm();
      strategy.optimizer_step(lr, clip_factor(gnorm, max_grad_norm));
    } else {  // the norm (for the record) is read in AdamW's own pass over the gradients
      gnorm = strategy.optimizer_step(lr, 1.0, /*want_norm=*/true);
    }
  }
  mark(ev.optimizer_end);
  return gnorm;
}

}  // namespace trainer
