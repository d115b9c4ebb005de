// Output paths, atomic writes, timing statistics and machine description; see result_record.h.
#include "io/result_record.h"

#include <atomic>

#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/errors.h"
#include "core/interrupt.h"
#include "io/checksum.h"

namespace trainer {
namespace fs = std::filesystem;

namespace {

/// The directory that will hold `path` ("." for a bare file name), with "." and ".." resolved lexically, so that
/// "a/../b.json" never creates "a".
fs::path parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).lexically_normal().parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

/// What is at `path` now, without following a final symbolic link.
fs::file_status status_of(const std::string& path) {
  std::error_code ec;
  return fs::symlink_status(path, ec);
}

/// write(2) all n bytes, retrying on EINTR and partial writes. False with errno set on failure.
bool write_all(int fd, const char* p, uint64_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, size_t(std::min<uint64_t>(n, 1ull << 30)));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= uint64_t(w);
  }
  return true;
}

std::string trim(std::string s) {
  const auto is_space = [](unsigned char c) { return std::isspace(c) || c == '\0'; };
  while (!s.empty() && is_space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return s.substr(i);
}

}  // namespace

void check_output_path(const std::string& path, const std::string& key) {
  CONFIG_CHECK(!path.empty(), "{}: the output path is empty", key);
  std::error_code ec;
  CONFIG_CHECK(!fs::is_directory(path, ec), "{}: '{}' is a directory; give a file path", key, path);
  CONFIG_CHECK(path.back() != '/' && fs::path(path).lexically_normal().has_filename(),
               "{}: '{}' names a directory (it ends in '/' or '..'); give a file path", key, path);
  // An existing output must be a regular file (replaced atomically), a symbolic link (its target is written) or a
  // character device such as /dev/null (written through); anything else (a FIFO, a socket) is refused.
  const fs::file_status st = status_of(path);
  if (fs::exists(st)) {
    const fs::file_status target = fs::status(path, ec);
    CONFIG_CHECK(fs::is_regular_file(target) || fs::is_character_file(target) ||
                     (fs::is_symlink(st) && !fs::exists(target)),
                 "{}: '{}' exists and is not a regular file or a character device (a FIFO or socket?)", key, path);
    if (fs::is_character_file(target)) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
      if (fd < 0)
        throw ConfigError(fmt::format("{}: cannot write to the device '{}': {}", key, path, std::strerror(errno)));
      ::close(fd);
      return;
    }
  }
  // Nothing is created here (a rejected config leaves no trace): the writers make the missing directories. What
  // must hold is that the nearest existing ancestor is a directory that takes files.
  fs::path dir = parent_dir(path);
  while (!dir.empty() && !fs::exists(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = ".";
  CONFIG_CHECK(fs::is_directory(dir, ec), "{}: cannot create directory under '{}': it is not a directory", key,
               dir.string());
  // Prove writability by creating a file: as root, access(W_OK) says yes even on a read-only mount.
  const fs::path probe = dir / fmt::format(".trainer-write-test.{}", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw ConfigError(fmt::format("{}: cannot create files in '{}' (for '{}'): {}", key, dir.string(), path,
                                  std::strerror(errno)));
  ::close(fd);
  ::unlink(probe.c_str());
}

bool is_file_at(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string lock_holder(int fd) {
  char buf[32] = {};
  if (::pread(fd, buf, sizeof buf - 1, 0) > 0 && !trim(buf).empty()) return "the run of pid " + trim(buf);
  return "another run";
}

namespace {
// The record lock this process holds (lock_record_path), released and its file removed at exit: unlinked while
// still locked, so that a run that opened it meanwhile finds it taken and one that opens it later makes a new one.
struct RecordLock {
  int fd = -1;
  std::string path;
  ~RecordLock() {
    if (fd < 0) return;
    if (is_file_at(fd, path)) ::unlink(path.c_str());
    ::close(fd);
  }
};
RecordLock& record_lock() {
  static RecordLock held;
  return held;
}
}  // namespace

std::string record_lock_path(const std::string& path) {
  std::error_code ec;
  const std::string canonical = fs::weakly_canonical(output_target(path), ec).string();
  const uint64_t h = fnv1a64(ec ? output_target(path) : canonical);  // of the record's canonical path
  const char* tmp = std::getenv("TMPDIR");
  const fs::path dir = fs::path(tmp && *tmp ? tmp : "/tmp") / fmt::format("trainer-locks-{}", ::getuid());
  return (dir / fmt::format("{}.{:016x}.lock", fs::path(canonical).filename().string(), h)).string();
}

void lock_record_path(const std::string& path, const std::string& key) {
  RecordLock& held = record_lock();
  if (held.fd >= 0) return;  // one record a process
  const fs::path target = output_target(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) return;  // a device: nothing to keep apart
  if (!fs::is_directory(parent_dir(target.string()), ec)) return;  // no record there yet: made by the writer
  const std::string lock = record_lock_path(path);
  fs::create_directories(fs::path(lock).parent_path(), ec);
  ::chmod(fs::path(lock).parent_path().c_str(), 0700);
  for (int attempt = 0; attempt < 5; ++attempt) {  // again while the file locked is no longer the lock file
    const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;  // no lock directory: unguarded, as before
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = lock_holder(fd);
      ::close(fd);
      if (err != EWOULDBLOCK) return;  // no flock on this filesystem
      throw ConfigError(fmt::format("{}: '{}' is the record of a run still starting or going ({}; lock '{}'); "
                                    "choose another path, or wait for it", key, path, holder, lock));
    }
    if (!is_file_at(fd, lock)) {
      ::close(fd);
      continue;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    const bool noted = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == ssize_t(pid.size());
    (void)noted;  // the lock holds without its note (a second run then names "another run")
    held.fd = fd;
    held.path = lock;
    return;
  }
}

namespace {
// The temp file being written, removed if a signal ends the run meanwhile (Ctrl-C, SIGTERM from a scheduler; the
// train job's first interrupt only stops it after the step, so the write completes): core/interrupt.h.
struct PendingTmp {
  explicit PendingTmp(const std::string& tmp) { set_pending_file(tmp.c_str()); }
  ~PendingTmp() { clear_pending_file(); }
  PendingTmp(const PendingTmp&) = delete;
  PendingTmp& operator=(const PendingTmp&) = delete;
};
}  // namespace

std::string output_target(const std::string& given) {
  std::error_code ec;
  std::string path = fs::path(given).lexically_normal().string();  // "a/../x" is "x", as check_output_path saw it
  for (int hops = 0; hops < 16 && fs::is_symlink(status_of(path)); ++hops) {  // a chain of links, even dangling
    fs::path target = fs::read_symlink(path, ec);
    if (ec) break;
    if (target.is_relative()) target = fs::path(path).parent_path() / target;
    path = target.lexically_normal().string();
  }
  return path;
}

fs::path first_missing_dir(const fs::path& dir) {
  fs::path created;
  for (auto d = fs::absolute(dir); !d.empty() && !fs::exists(d); d = d.parent_path()) {
    created = d;
    if (d == d.parent_path()) break;
  }
  return created;
}

void remove_created_dirs(const fs::path& dir, const fs::path& created) {
  if (created.empty()) return;
  std::error_code ec;
  for (auto d = fs::absolute(dir); ec.clear(), fs::remove(d, ec); d = d.parent_path())
    if (d == created || d == d.parent_path()) break;  // remove() leaves a directory that is not empty
}

PriorOutput::PriorOutput(const std::string& path) : target_(output_target(path)) {
  std::error_code ec;
  const fs::file_status st = fs::status(target_, ec);
  if (ec || !fs::exists(st)) return;  // nothing there: restore() removes what the run wrote
  if (!fs::is_regular_file(st)) {     // a character device (/dev/null): written through, never removed
    special_ = true;
    return;
  }
  existed_ = true;
  const uintmax_t size = fs::file_size(target_, ec);
  if (ec || size > kMaxKeptBytes) return;  // not kept: restore() leaves the path alone
  std::ifstream in(target_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad() || bytes.size() != size) return;
  bytes_ = std::move(bytes);
  kept_ = true;
}

void PriorOutput::restore() {
  if (special_) return;
  std::error_code ec;
  if (!existed_) {
    if (fs::is_regular_file(fs::symlink_status(target_, ec))) fs::remove(target_, ec);
    return;
  }
  if (!kept_) return;
  try {
    write_file_atomic(target_, {{bytes_.data(), bytes_.size()}});
  } catch (const std::exception&) {  // best effort: the run is failing already
  }
}

void write_file_atomic(const std::string& given, const std::vector<FilePart>& parts) {
  std::error_code ec;
  // A symbolic link is written through: the temp file and the rename go to its target's directory.
  const std::string path = output_target(given);
  // A character device (/dev/null, a terminal) cannot be replaced by a rename: write to it directly.
  if (fs::is_character_file(fs::status(path, ec))) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeError(fmt::format("cannot write '{}': {}", path, std::strerror(errno)));
    for (const FilePart& p : parts)
      if (!write_all(fd, static_cast<const char*>(p.data), p.bytes)) {
        const int err = errno;
        ::close(fd);
        throw RuntimeError(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
      }
    ::close(fd);
    return;
  }
  // One temp file per write: two threads (rank 0's main thread and its failure-notice listener) may write one path.
  static std::atomic<unsigned> writes{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), writes.fetch_add(1));
  const PendingTmp pending(tmp);
  fs::create_directories(parent_dir(path), ec);
  if (ec) throw RuntimeError(fmt::format("cannot write '{}': creating its directory failed: {}", path, ec.message()));
  const auto fail = [&](const char* what, int err, int fd) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return RuntimeError(fmt::format("cannot write '{}': {} failed: {}", path, what, std::strerror(err)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(fmt::format("cannot write '{}': creating '{}' failed: {}", path, tmp, std::strerror(errno)));
  for (const FilePart& p : parts)
    if (!write_all(fd, static_cast<const char*>(p.data), p.bytes)) throw fail("write", errno, fd);
  if (::fsync(fd) != 0) throw fail("fsync", errno, fd);
  if (::close(fd) != 0) throw fail("close", errno, -1);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw fail("rename", errno, -1);
  // Make the rename itself durable (best effort: some filesystems refuse fsync on a directory).
  const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_json_atomic(const std::string& path, const nlohmann::json& j) {
  std::string text;
  try {
    text = j.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(fmt::format("cannot write '{}': JSON serialisation failed: {}", path, e.what()));
  }
  write_file_atomic(path, {{text.data(), text.size()}});
}

nlohmann::json timing_stats(const std::vector<double>& samples_ms) {
  nlohmann::json j;
  j["samples"] = samples_ms;  // [] when empty
  const size_t n = samples_ms.size();
  if (n == 0) {
    for (const char* k : {"mean_ms", "std_ms", "min_ms", "median_ms", "max_ms"}) j[k] = nullptr;
    return j;
  }
  double sum = 0;
  for (double x : samples_ms) sum += x;
  const double mean = sum / double(n);
  double ss = 0;
  for (double x : samples_ms) ss += (x - mean) * (x - mean);  // two-pass: no cancellation
  std::vector<double> sorted = samples_ms;
  std::sort(sorted.begin(), sorted.end());
  j["mean_ms"] = mean;
  j["std_ms"] = n < 2 ? 0.0 : std::sqrt(ss / double(n - 1));
  j["min_ms"] = sorted.front();
  j["median_ms"] = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  j["max_ms"] = sorted.back();
  return j;
}

namespace {
/// This machine's host name (gethostname), or "" when it cannot be read.
std::string host_name() {
  char host[256] = {};
  return ::gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string();
}

/// When process `pid` of this host started (seconds since the epoch, from /proc/<pid>/stat's start time and
/// /proc/stat's boot time), or -1 when it does not exist or cannot be read.
double process_start_epoch(int64_t pid) {
  std::ifstream st(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(st, line)) return -1;
  const size_t close = line.rfind(')');  // the command name (field 2) may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i)  // field 22: starttime, clock ticks after boot
    if (i == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  std::ifstream stat("/proc/stat");
  long long btime = -1;
  for (std::string l; std::getline(stat, l);)
    if (l.rfind("btime ", 0) == 0) btime = std::atoll(l.c_str() + 6);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (btime < 0 || hz <= 0 || start_ticks == 0) return -1;
  return double(btime) + double(start_ticks) / double(hz);
}
}  // namespace

void check_record_not_in_use(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;  // no file; or /dev/null, /dev/stdout, ...: never read (a terminal blocks)
  std::ifstream f(path);
  if (!f) return;
  nlohmann::json r;
  try {
    r = nlohmann::json::parse(f);
  } catch (const std::exception&) {
    return;  // not a record (a file of the user's: check_output_path and the input checks rule on it)
  }
  if (!r.is_object() || r.value("status", "") != "running" || !r.contains("pid") || !r["pid"].is_number_integer() ||
      !r.contains("started") || !r["started"].is_string())
    return;
  const int64_t pid = r["pid"].get<int64_t>();
  const std::string here = host_name();
  const nlohmann::json machine = r.value("machine", nlohmann::json::object());
  if (pid <= 0 || pid == ::getpid() || here.empty() || !machine.is_object() || machine.value("host", "") != here)
    return;
  // That run is alive when its pid is a process that started shortly before the record's "started" (written once
  // MPI is up and the config read): a pid reused after the run died started later. Any binary: a copy, a rebuild.
  std::tm tm{};
  const std::string started = r["started"].get<std::string>();
  if (!::strptime(started.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return;
  const double record_epoch = double(::timegm(&tm));
  const double began = process_start_epoch(pid);
  if (began < 0 || began > record_epoch + 2 || record_epoch - began > 600) return;
  throw ConfigError(fmt::format("{}: '{}' is the record of a run still going (pid {} on this host, started {}); "
                                "choose another path, or wait for it", key, path, pid, started));
}

nlohmann::json input_files(const RunConfig& c) {
  const auto real = [](const std::optional<std::string>& path) -> nlohmann::json {
    if (!path || path->empty()) return nullptr;
    std::error_code ec;
    const std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(*path, ec), ec);
    return ec ? nlohmann::json(*path) : nlohmann::json(p.string());
  };
  const bool tokens = c.job == "train" && c.data.source == "tokens";
  return {{"data.path", tokens ? real(c.data.path) : nullptr},
          {"init.weights", c.job == "train" ? real(c.init.weights) : nullptr},
          {"init.resume", c.job == "train" && c.init.resume
                              ? real(c.init.resume_step_dir.empty() ? *c.init.resume : c.init.resume_step_dir)
                              : nullptr}};
}

nlohmann::json machine_info(const std::string& backend_description) {
  nlohmann::json m;
  const std::string host = host_name();
  m["host"] = host.empty() ? std::string("unknown") : host;
  std::error_code ec;  // the directory the config's relative paths (data.path, init.weights) are relative to
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (!ec) m["cwd"] = cwd.string();
  struct utsname u {};
  m["os"] = ::uname(&u) == 0 ? fmt::format("{} {} {} {}", u.sysname, u.release, u.version, u.machine)
                             : std::string("unknown");

  std::string cpu;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; cpu.empty() && std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0 || line.rfind("cpu model", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) cpu = trim(line.substr(colon + 1));
    }
  }
  m["cpu_model"] = cpu.empty() ? std::string(u.machine[0] ? u.machine : "unknown") : cpu;
  m["cpu_cores"] = int64_t(::sysconf(_SC_NPROCESSORS_ONLN));
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) m["cpu_cores_available"] = CPU_COUNT(&set);

  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    std::string s(lib, size_t(std::max(0, len)));
    m["mpi_library"] = trim(s.substr(0, s.find('\n')));
  } else {
    m["mpi_library"] = "unknown";
  }
  int version = 0, subversion = 0;
  if (MPI_Get_version(&version, &subversion) == MPI_SUCCESS) m["mpi_standard"] = fmt::format("{}.{}", version, subversion);
  m["backend"] = backend_description;
  return m;
}

std::string default_results_path(const std::string& name) {
  std::string clean = name.empty() ? std::string("run") : name;
  for (char& c : clean)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (clean.front() == '.') clean.front() = '_';  // not a hidden file (name "../x" gave ".._x-...json")
  const std::time_t now = std::time(nullptr);
  std::tm tm {};
  ::localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  // The process id keeps two runs started in the same second apart.
  return fmt::format("results/runs/{}-{}-{}.json", clean, stamp, ::getpid());
}

}  // namespace trainer
