// Interrupt handlers and the pending file's removal (see interrupt.h). The handlers do only async-signal-safe things:
// atomic loads and stores, and on a signal that ends the process write(2), unlink(2), sigaction and raise.
#include "core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <iterator>
#include <cstdint>
#include <cstring>
#include <ctime>

namespace trainer {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};  // CLOCK_MONOTONIC of the first signal
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<int64_t>::is_always_lock_free,
              "the handler stores into them");
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
// The same signal again within this window is one delivery seen twice, not a second request: Slurm signals every task
// of a step and srun forwards what it receives to the same tasks; a shell's Ctrl-C can reach mpirun and a rank.
constexpr int64_t kDuplicateWindowNs = 250'000'000;
// The temporary files being written (set_pending_file), one slot per writing thread: a pointer to that thread's copy
// of its path, removed before a signal ends the process. A thread takes a free slot on its first write and gives it
// back when it exits.
constexpr int kPendingSlots = 8;  // the main thread, the failure listener, and room to spare
std::atomic<const char*> g_pending_files[kPendingSlots];
std::atomic<bool> g_slot_taken[kPendingSlots];
constexpr size_t kPendingPathMax = 4096;
struct PendingSlot {
  char path[kPendingPathMax];
  int slot = -1;  // index in g_pending_files, -1 before the thread's first write (or when every slot was taken)
  ~PendingSlot() {  // the thread exits: its path's storage goes, so the handler must no longer see it
    if (slot < 0) return;
    g_pending_files[slot].store(nullptr);
    g_slot_taken[slot].store(false);
    slot = -1;
  }
};
PendingSlot& pending_slot() {
  thread_local PendingSlot p;
  return p;
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
  for (const std::atomic<const char*>& f : g_pending_files)
    if (const char* p = f.load()) ::unlink(p);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);  // SIGUSR1/2's default action also terminates
}

/// Where no interrupt handler is installed: the pending file goes, then the signal does what it would have done.
void on_cleanup_signal(int sig) { end_with(sig); }

std::atomic<bool> g_announce{true};

/// The first signal's acknowledgement, written at once (the step it stops after may take seconds, and a second press
/// ends the run without its record). Async-signal-safe: fixed strings and write(2).
void announce_first(int sig) {
  if (!g_announce.load()) return;
  const char* name = interrupt_signal_name(sig);  // a switch over constant strings: safe in a handler
  static const char a[] = "\ntrainer: ";
  static const char b[] = " received: stopping after the current step (the record, and the checkpoint where one is "
                          "configured, follow); a second interrupt stops at once, without them\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, a, sizeof a - 1);
  n = ::write(STDERR_FILENO, name, std::strlen(name));
  n = ::write(STDERR_FILENO, b, sizeof b - 1);
}

void on_signal(int sig) {
  int expected = 0;
  const int64_t now = monotonic_ns();
  if (g_signal.compare_exchange_strong(expected, sig)) {  // the first: stop after the current step
    g_first_ns.store(now);
    const int saved_errno = errno;  // the interrupted code may read errno after this returns (write can fail)
    announce_first(sig);
    errno = saved_errno;
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
  for (int s : kSignals) {
    struct sigaction old {};  // an ignored SIGHUP (nohup: the run outlives its terminal) stays ignored
    if (s == SIGHUP && ::sigaction(s, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
      continue;
    ::sigaction(s, &sa, nullptr);
  }
}

void set_interrupt_announce(bool on) { g_announce.store(on); }

namespace {
bool g_early[std::size(kSignals)] = {};  // which signals install_early_interrupt_handlers took over (their action
                                        // was the default)
}  // namespace

void install_early_interrupt_handlers() {
  g_announce.store(false);  // which rank this is is not known yet
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction old {};
    if (::sigaction(kSignals[i], nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
      continue;  // ignored (a job started with & from a script) or someone's handler: left as it is
    g_early[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

void restore_early_interrupt_handlers() {
  int raise_sig = 0;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    if (!g_early[i]) continue;
    g_early[i] = false;
    struct sigaction now {};
    if (::sigaction(kSignals[i], nullptr, &now) != 0 || (now.sa_flags & SA_SIGINFO) || now.sa_handler != on_signal)
      continue;  // replaced since (by MPI_Init, say): theirs stays
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(kSignals[i], &dfl, nullptr);
    if (g_signal.load() == kSignals[i]) raise_sig = kSignals[i];
  }
  if (raise_sig != 0) ::raise(raise_sig);  // received during start-up: it takes its default action now
}

void ignore_broken_pipe() {
  struct sigaction sa {};
  sa.sa_handler = SIG_IGN;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGPIPE, &sa, nullptr);
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
  // A copy the handler may read at any time: this thread's buffer lives as long as the thread. The slot is emptied
  // while the copy is made, so a handler that loads it then sees no file. (A handler on another thread that loaded
  // the pointer before an earlier clear_pending_file and is still inside unlink while this copy runs could read a
  // mixed path: it would have to be interrupted for exactly that long; accepted.)
  PendingSlot& mine = pending_slot();
  if (mine.slot >= 0) g_pending_files[mine.slot].store(nullptr);
  for (int i = 0; i < kPendingSlots && mine.slot < 0; ++i) {
    bool expected = false;
    if (g_slot_taken[i].compare_exchange_strong(expected, true)) mine.slot = i;
  }
  const size_t n = std::strlen(path);
  // too long to keep, or more than kPendingSlots threads writing: this file is not removed on a signal
  if (n >= kPendingPathMax || mine.slot < 0) return;
  std::memcpy(mine.path, path, n + 1);
  g_pending_files[mine.slot].store(mine.path);
}

void clear_pending_file() {
  const PendingSlot& mine = pending_slot();
  if (mine.slot >= 0) g_pending_files[mine.slot].store(nullptr);
}

int interrupt_signal() { return g_signal.load(); }

const char* interrupt_signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal";
  }
}

void reset_interrupt() { g_signal.store(0); }

}  // namespace trainer
