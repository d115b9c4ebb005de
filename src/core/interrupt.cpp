// Interrupt handlers (see interrupt.h). The handler does only async-signal-safe things: one atomic store, and on the
// second signal write(2), sigaction and raise.
#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace trainer {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};  // CLOCK_MONOTONIC of the first signal
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the handler stores into them");
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
// The same signal again within this window is one delivery seen twice, not a second request: Slurm signals every task
// of a step and srun forwards what it receives to the same tasks; a shell's Ctrl-C can reach mpirun and a rank.
constexpr int64_t kDuplicateWindowNs = 250'000'000;

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void on_signal(int sig) {
  int expected = 0;
  const int64_t now = monotonic_ns();
  if (g_signal.compare_exchange_strong(expected, sig)) {  // the first: stop after the current step
    g_first_ns.store(now);
    return;
  }
  if (expected == sig && now - g_first_ns.load() < kDuplicateWindowNs) return;
  static const char msg[] = "\ntrainer: second interrupt: stopping now (the record keeps status \"running\")\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // SIGUSR1/2's default action also terminates
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or MPI call resumes; the step loop polls the flag
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
}

int interrupt_signal() { return g_signal.load(); }

const char* interrupt_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal";
  }
}

void reset_interrupt() { g_signal.store(0); }

}  // namespace trainer
