// Result records and output files: path checks done before a run starts, atomic writes (never a half-written file),
// timing statistics and the machine description stored in every record (DESIGN.md, "Result record").
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"

namespace trainer {

/// Checks, before any work, that `path` can be written: creates its parent directory (mkdir -p) and proves the
/// parent is writable by creating and removing a temp file there (access() is not enough: tests run as root).
/// Raises ConfigError naming `key` (e.g. "output.results") when the parent cannot be created or written, or when
/// `path` is an existing directory. An empty path is an error too.
void check_output_path(const std::string& path, const std::string& key);

/// Refuses a result record that a live run is writing: `path` is a regular file holding a record with status
/// "running" of this host whose pid is a process that started at most 600 s before the record's "started" (any
/// binary: a copy, a rebuilt one), and not this process. Raises ConfigError naming `key`, the pid and when that run
/// started. Anything else passes (no file, a device such as /dev/null, another status, another host, a dead pid, a
/// pid reused after that run died): a record left "running" by a killed run is replaced as before.
void check_record_not_in_use(const std::string& path, const std::string& key);

/// Rank 0's claim on its record path, held until the process exits: an advisory lock (flock) on
/// record_lock_path(path), holding this process's pid. Two runs started together both pass check_record_not_in_use
/// (neither has written its "running" record yet); the second to lock gets ConfigError naming `key`, the holder's pid
/// and the lock. Nothing is locked for a device (/dev/null), a record directory that does not exist yet (the record's
/// writer makes it), a lock that cannot be made, or a filesystem without flock (unguarded, as before). The lock file
/// is removed at a normal exit; one left by an abort is reused (the lock went with its process).
void lock_record_path(const std::string& path, const std::string& key);
/// The lock file of a record path: $TMPDIR (or /tmp) / trainer-locks-UID / NAME.HASH.lock, HASH the FNV-1a 64 of the
/// record's canonical path (output_target, then weakly_canonical) in 16 hex digits, NAME its file name. Outside the
/// record's directory, so that an abort leaves nothing beside the record.
std::string record_lock_path(const std::string& path);

/// Whether descriptor fd is still the file at `path` (another process may have unlinked it and made a new one
/// between an open and a flock: a lock on the unlinked file would keep nobody out).
bool is_file_at(int fd, const std::string& path);
/// Who holds the lock file open at fd (a record's start-up lock, a checkpoint directory's .lock), from the pid its
/// holder wrote there: "the run of pid N", or "another run" where it wrote none.
std::string lock_holder(int fd);

/// One contiguous piece of a file written by write_file_atomic.
struct FilePart {
  const void* data;
  uint64_t bytes;
};

/// Writes the concatenation of `parts` to `path` atomically: `path.tmp.<pid>.<n>` (n counts the process's writes, so
/// two threads may write one path) is written, fsynced and renamed over `path` (then the directory is fsynced), so
/// readers see the old file or the new one, never half of one.
/// Raises RuntimeError naming the path and the system error on failure; the temp file is removed.
void write_file_atomic(const std::string& path, const std::vector<FilePart>& parts);

/// The file write_file_atomic writes for `path`: the end of its chain of symbolic links (up to 16 hops, dangling
/// included), lexically normalised.
std::string output_target(const std::string& path);

/// The outermost missing directory on the way to directory `dir` (dir itself included), "" when it exists: what a
/// writer will create there, and what a run that ends without output removes again.
std::filesystem::path first_missing_dir(const std::filesystem::path& dir);
/// Removes directory `dir` and its parents up to `created` (first_missing_dir's answer) while they are empty.
void remove_created_dirs(const std::filesystem::path& dir, const std::filesystem::path& created);

/// What an output path held before a run replaced it (the result record's "running" marker), so that a run that ends
/// without a record (bad input found late, exit code 2) leaves the path as it found it. Made before the first write.
/// Nothing is left on disk for it (an abort or a SIGKILL leaves no trace of it).
class PriorOutput {
 public:
  static constexpr uintmax_t kMaxKeptBytes = uintmax_t(256) << 20;  // a larger earlier file is not kept
  /// Notes output_target(path): an existing regular file's bytes are read into memory (up to kMaxKeptBytes); a
  /// character device or other special file (/dev/null) is noted as such.
  explicit PriorOutput(const std::string& path);
  PriorOutput(const PriorOutput&) = delete;
  PriorOutput& operator=(const PriorOutput&) = delete;
  /// Writes the earlier file back (atomically), or, where there was none, removes the regular file the run wrote; a
  /// special file, and an earlier file that was too large or unreadable to keep, are left alone (never removed).
  /// Best effort: errors are ignored.
  void restore();

 private:
  std::string target_, bytes_;
  bool existed_ = false, special_ = false, kept_ = false;
};

/// Writes `j` (indented by 2, newline-terminated) to `path` with write_file_atomic. RuntimeError on failure, including
/// a json that cannot be serialised (invalid UTF-8 in a string).
void write_json_atomic(const std::string& path, const nlohmann::json& j);

/// Summary of timing samples in milliseconds:
///   {mean_ms, std_ms, min_ms, median_ms, max_ms, samples}
/// std_ms is the sample standard deviation sqrt(sum (x - mean)^2 / (n - 1)), 0 for n < 2; median_ms is the middle
/// sample, or the mean of the two middle samples for even n. Empty input: every statistic null and samples [].
nlohmann::json timing_stats(const std::vector<double>& samples_ms);

/// The record's `inputs`: the real path (symlinks, ./ and ../ resolved) of each file the run reads, by config key:
/// {"data.path" (source tokens), "init.weights", "init.resume" (the step directory resolved)}, null where it reads
/// none; so that tools compare the files, not paths typed from different directories (launch/loss_match.py).
nlohmann::json input_files(const RunConfig& c);

/// The host part of `machine` in a result record:
///   {host, cwd (the working directory: what the config's relative paths are relative to), os (uname: sysname
///    release version machine), cpu_model (/proc/cpuinfo), cpu_cores (online logical CPUs), mpi_library
///    (MPI_Get_library_version, first line), mpi_standard ("3.1"), backend (backend_description)}.
/// The CUDA backend adds its GPU fields (gpu_name, gpu_memory_bytes, driver, cuda/nccl versions) to this object.
/// Safe to call before MPI_Init (both MPI calls are allowed then).
nlohmann::json machine_info(const std::string& backend_description);

/// "results/runs/<name>-<YYYYmmdd-HHMMSS>-<pid>.json" with the local time now; characters of `name` other than
/// [A-Za-z0-9._-] become '_' and an empty name becomes "run".
std::string default_results_path(const std::string& name);

}  // namespace trainer
