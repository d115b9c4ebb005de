#include "dist/bootstrap.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "dist/communicator.h"
#include "dist/mpi_communicator.h"
#include "dist/nccl_communicator.h"

namespace trainer {

MpiSession::MpiSession(int* argc, char*** argv) {
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &thread_level_));
  // MPI calls return their errors instead of aborting the job from inside MPI (the default handler): every call is
  // checked (MPI_CHECK, the communicators' own checks), and a failure goes through fatal(), whose hook writes the
  // result record (rank 0) or tells rank 0 (a rank > 0) before the job is aborted. The communicators' duplicates
  // inherit this handler (and set it themselves).
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_rank(local, &local_rank_));
  MPI_CHECK(MPI_Comm_size(local, &local_size_));
  MPI_CHECK(MPI_Comm_free(&local));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &notice_comm_));
  // Errors on it return (notify_failure is best effort and checks them): set here too, not only inherited.
  MPI_CHECK(MPI_Comm_set_errhandler(notice_comm_, MPI_ERRORS_RETURN));
}

MpiSession::~MpiSession() {
  stop_listening();  // joins the listener, the other user of notice_comm_
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (notice_comm_ != MPI_COMM_NULL) MPI_Comm_free(&notice_comm_);
  MPI_Finalize();
}

namespace {
using StartupClock = std::chrono::steady_clock;

/// Waits for the non-blocking start-up collective `req` (polled every millisecond) until `t0` + `timeout_s` (the
/// agreement's start: one deadline for all its steps); past it, fatal() names the check. Rank 0 says once, 30 s after
/// t0, that it is waiting.
void await_startup(MPI_Request& req, const char* what, int rank, double timeout_s, StartupClock::time_point t0) {
  bool said = false;
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    const double s = std::chrono::duration<double>(StartupClock::now() - t0).count();
    if (rank == 0 && !said && s >= 30.0 && s < timeout_s) {
      std::fprintf(stderr, "trainer: waiting for every rank to reach the start-up check (%s): 30 s so far, at most "
                   "%.0f s (parallel.startup_timeout_s)\n", what, timeout_s);
      said = true;
    }
    if (s >= timeout_s)
      fatal("MPI", what, __FILE__, __LINE__,
            fmt::format("not every rank reached the start-up check ({}) within {:.0f} s (parallel.startup_timeout_s): "
                        "a rank stopped, hangs before it (loading its config or data?) or ended early (the same "
                        "command on every rank?)", what, timeout_s));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// The lowest rank of `size` for which `failed` is true, or -1 (first_failing_rank's collective, `what` naming it).
int first_failing(bool failed, int rank, int size, const char* what, double timeout_s, StartupClock::time_point t0) {
  int mine = failed ? rank : size, first = size;
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &req));
  await_startup(req, what, rank, timeout_s, t0);
  return first < size ? first : -1;
}
}  // namespace

int MpiSession::first_failing_rank(bool failed, double timeout_s) const {
  return first_failing(failed, rank_, size_, "which ranks loaded their config", timeout_s, StartupClock::now());
}

int MpiSession::first_rank_differing(const std::string& text, double timeout_s) const {
  const auto t0 = StartupClock::now();
  unsigned long long h = std::hash<std::string>{}(text), root = h;
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(&root, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD, &req));
  await_startup(req, "whether the ranks' configs agree", rank_, timeout_s, t0);
  return first_failing(h != root, rank_, size_, "whether the ranks' configs agree", timeout_s, t0);
}

std::string MpiSession::text_from(int root, const std::string& text, double timeout_s) const {
  const auto t0 = StartupClock::now();
  constexpr size_t kMaxBytes = 64 * 1024;  // a message, not data: longer ones are cut
  unsigned long long n = std::min(text.size(), kMaxBytes);
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, MPI_COMM_WORLD, &req));
  await_startup(req, "a failed rank's message", rank_, timeout_s, t0);
  std::string out = rank_ == root ? text.substr(0, size_t(n)) : std::string(size_t(n), '\0');
  if (n == 0) return out;
  MPI_CHECK(MPI_Ibcast(out.data(), int(n), MPI_CHAR, root, MPI_COMM_WORLD, &req));
  await_startup(req, "a failed rank's message", rank_, timeout_s, t0);
  return out;
}

namespace {
constexpr int kNoticeTag = 7;  // a failure notice: "<exit code>\n<message>"
constexpr int kEndTag = 8;     // a rank's end (report_end): "<exit code>\n<message>", the listener never takes it

/// Sends `text` to rank 0 on `comm` with `tag` (non-blocking; returns once the send completed or after 1 s).
void send_to_rank_0(MPI_Comm comm, int tag, const std::string& text) {
  static std::string kept[2];  // outlive a send that has not completed by the deadline (the job is ending anyway)
  std::string& buf = kept[tag == kNoticeTag ? 0 : 1];
  buf = text;
  MPI_Request req;
  if (MPI_Isend(buf.data(), int(buf.size()), MPI_CHAR, 0, tag, comm, &req) != MPI_SUCCESS) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

/// "<code>\n<message>" split into its parts.
std::pair<int, std::string> parse_notice(const std::string& text) {
  const size_t nl = text.find('\n');
  return {std::atoi(text.substr(0, nl).c_str()), nl == std::string::npos ? std::string() : text.substr(nl + 1)};
}

/// The word a probe found (`st`: its source and tag) received from `comm` and parsed; nullopt when an MPI call
/// fails (the notices' communicator returns errors, MPI_ERRORS_RETURN: a failed peer must not abort rank 0 here).
/// The listener and await_ends both take words this way.
std::optional<std::pair<int, std::string>> receive_word(MPI_Comm comm, const MPI_Status& st) {
  int bytes = 0;
  if (MPI_Get_count(&st, MPI_CHAR, &bytes) != MPI_SUCCESS || bytes < 0) return std::nullopt;  // MPI_UNDEFINED < 0
  std::string text(size_t(bytes), '\0');
  if (MPI_Recv(text.data(), bytes, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, comm, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return std::nullopt;
  return parse_notice(text);
}
}  // namespace

void MpiSession::listen_for_failures(TakeNotice take, FailureHandler on_notice) {
  if (rank_ != 0 || size_ < 2 || thread_level_ != MPI_THREAD_MULTIPLE || listener_.joinable()) return;
  stop_.store(false);
  listener_ = std::thread([this, take = std::move(take), on_notice = std::move(on_notice)] {
    while (!stop_.load()) {
      int flag = 0;
      MPI_Status st;
      // A failed probe ends the job through fatal() (rank 0's fatal hook writes the record, then MPI_Abort).
      MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, notice_comm_, &flag, &st));
      if (!flag) {  // polled, not a blocking receive: Open MPI's blocking calls spin and would take a core
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (!take(st.MPI_SOURCE)) return;  // rank 0's end is claimed: await_ends reads the notice
      // This thread owns the end now, so it ends the run even when the notice cannot be read: that rank failed.
      const auto word = receive_word(notice_comm_, st);
      if (word) on_notice(st.MPI_SOURCE, word->first, word->second);
      else on_notice(st.MPI_SOURCE, 1, "it reported a failure whose notice could not be received (MPI error)");
    }
  });
}

void MpiSession::stop_listening() {
  stop_.store(true);
  if (listener_.joinable() && listener_.get_id() != std::this_thread::get_id()) listener_.join();
}

void MpiSession::notify_failure(int code, const std::string& message) const {
  if (rank_ == 0 || notice_comm_ == MPI_COMM_NULL) return;
  send_to_rank_0(notice_comm_, kNoticeTag, std::to_string(code) + "\n" + message);
}

void MpiSession::report_end(int code, const std::string& message) const {
  if (rank_ == 0 || notice_comm_ == MPI_COMM_NULL) return;
  send_to_rank_0(notice_comm_, kEndTag, std::to_string(code) + "\n" + message);
}

std::vector<MpiSession::RankEnd> MpiSession::await_ends(double timeout_s) const {
  std::vector<RankEnd> silent;
  if (rank_ != 0 || size_ < 2 || notice_comm_ == MPI_COMM_NULL) return silent;
  std::vector<bool> ended(size_t(size_), false);
  ended[0] = true;
  int left = size_ - 1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, notice_comm_, &flag, &st) != MPI_SUCCESS) break;
    if (!flag) {  // polled: a blocking receive could wait forever for a rank that never answers
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const auto word = receive_word(notice_comm_, st);
    if (!word) break;
    const int from = st.MPI_SOURCE;
    if (from <= 0 || from >= size_ || ended[size_t(from)]) continue;  // a second word of a rank: its first counts
    ended[size_t(from)] = true;
    --left;
    const auto& [code, message] = *word;
    // A failure ends the wait: rank 0 records it and aborts the job, and that rank waits for the abort.
    if (st.MPI_TAG == kNoticeTag || (code != 0 && code != 4)) return {{from, code, message}};
  }
  for (int r = 1; r < size_; ++r)
    if (!ended[size_t(r)]) silent.push_back({r, -1, ""});
  return silent;
}

std::unique_ptr<Communicator> make_communicator(const RunConfig& cfg, Backend& be, const RunContext& ctx) {
  CONFIG_CHECK(cfg.parallel.strategy != "none" || ctx.world_size == 1,
               "parallel.strategy: 'none' runs one process, but {} ranks were started (use ddp_*, zero1 or fsdp)",
               ctx.world_size);
  if (cfg.parallel.strategy == "none") return make_mpi_communicator(be, cfg.parallel.comm_timeout_s);
  return make_world_communicator(cfg.parallel.comm, cfg.parallel.comm_timeout_s, be);
}

std::unique_ptr<Communicator> make_world_communicator(const std::string& comm, double timeout_s, Backend& be) {
  if (comm == "mpi") return make_mpi_communicator(be, timeout_s);
  if (comm == "nccl") {
    CONFIG_CHECK(be.device() == Device::cuda,
                 "parallel.comm: 'nccl' needs device 'cuda' (this run is on {}); use parallel.comm=mpi", be.name());
#ifdef TRAINER_HAVE_NCCL
    return make_nccl_communicator(be, timeout_s);
#else
    throw ConfigError("parallel.comm: 'nccl' is not available: this trainer was built without NCCL (configure with "
                      "NCCL_HOME pointing at an NCCL install), use parallel.comm=mpi");
#endif
  }
  throw ConfigError(fmt::format("parallel.comm: '{}' is not a communicator (mpi | nccl)", comm));
}

}  // namespace trainer
