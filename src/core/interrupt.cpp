// Interrupt handlers and the pending file's removal (see interrupt.h). The handlers do only async-signal-safe things:
// atomic loads and stores, and on a signal that ends the process write(2), unlink(2), sigaction and raise.
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
// The temporary file being written (set_pending_file): a pointer to the writing thread's copy of its path,
// removed before a signal ends the process.
std::atomic<const char*> g_pending_file{nullptr};
constexpr size_t kPendingPathMax = 4096;
char* pending_buffer() {
  thread_local char buf[kPendingPathMax];
  return buf;
}
static_assert(std::atomic<const char*>::is_always_lock_free, "the handlers load it");

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Removes the pending file, restores the default action of `sig` and raises it again (the process ends as the
/// signal's default action says).
void end_with(int sig) {
  if (const char* p = g_pending_file.load()) ::unlink(p);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // SIGUSR1/2's default action also terminates
}

/// Where no interrupt handler is installed: the pending file goes, then the signal does what it would have done.
void on_cleanup_signal(int sig) { end_with(sig); }

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
  end_with(sig);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or MPI call resumes; the step loop polls the flag
  for (int s : kSignals) ::sigaction(s, &sa, nullptr);
}

void set_pending_file(const char* path) {
  // SIGINT, SIGTERM and SIGHUP remove it where they would end the process (their action is the default one; checked
  // on every call, a few system calls beside a file's write). A handler already there (install_interrupt_handlers',
  // or the caller's) and an ignored signal (nohup's SIGHUP) are left as they are.
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(s, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_cleanup_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(s, &sa, nullptr);
  }
  // A copy the handler may read at any time: this thread's buffer lives as long as the thread, so a handler that
  // loaded the pointer just before clear_pending_file never reads freed memory.
  char* buf = pending_buffer();
  const size_t n = std::strlen(path);
  if (n >= kPendingPathMax) return;  // too long to keep: not removed on a signal
  std::memcpy(buf, path, n + 1);
  g_pending_file.store(buf);
}

void clear_pending_file() {
  const char* mine = pending_buffer();  // unless another thread's write has taken the slot since
  g_pending_file.compare_exchange_strong(mine, nullptr);
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
