// Training checkpoints on disk (issue 18): the directory protocol, the manifest and partial reads of shard files.
// What goes into a checkpoint (weights, optimizer shards, step) is decided by jobs/train_checkpoint.cpp.
//
// output.checkpoint (and init.resume) name a directory DIR:
//   DIR/latest                          the name of the newest complete checkpoint ("step-00000004"), one line,
//                                       replaced atomically (write_file_atomic) after that checkpoint is complete
//   DIR/model.safetensors               a hard link to the newest checkpoint's weights (what init.weights can name)
//   DIR/step-00000004/manifest.json     written last; a step directory without it is not a checkpoint; its "files"
//                                       gives each file's size and CRC-32s (io/checksum.h: the whole file's and
//                                       each 64 MiB block's), checked where a resume reads the file (a file changed
//                                       or damaged since: one line, exit 2). The manifest itself has no checksum (its
//                                       fields are checked one by one), and a manifest without "files" (written
//                                       before they were recorded) resumes unchecked, with a warning.
//   DIR/step-00000004/model.safetensors the full weights in the storage dtype (fp32; bf16 for bf16_pure) with the
//                                       reference names (loadable by PyTorch)
//   DIR/step-00000004/optim-rank00000.safetensors   one rank's optimizer state (manifest: its flat ranges)
//   DIR/.tmp-step-00000004/             a write in progress: every rank writes its files here, then rank 0 writes
//                                       the manifest, fsyncs and renames it to step-00000004 (a new name: a rename
//                                       never replaces a directory) and only then points `latest` at it.
// A crash (SIGKILL, power loss) at any moment leaves `latest` naming a complete earlier checkpoint. Each write keeps
// the new checkpoint and the one `latest` named before it, and removes older step directories and stale .tmp-*.
// Every rank writes into DIR: with several nodes, DIR must be on a filesystem they share.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/tensor.h"
#include "io/checksum.h"
#include "io/safetensors.h"

namespace trainer {

inline constexpr const char* kCheckpointFormat = "trainer.checkpoint/1";

/// "step-00000004": the directory name of the checkpoint taken after `step` steps.
std::string checkpoint_step_name(int64_t step);

/// The step directory a resume from `dir` reads: `dir` itself when it holds manifest.json (a step directory named
/// directly), else DIR/<the name in DIR/latest>. Raises ConfigError starting with "init.resume:" when there is no
/// checkpoint: no such directory, no `latest`, `latest` naming a directory without manifest.json (half-written).
std::string resolve_checkpoint(const std::string& dir);
/// init.resume's step directory: the one load_config resolved (c.init.resume_step_dir), else resolve_checkpoint's
/// answer now (a config made without load_config). Requires c.init.resume.
std::string resume_step_dir(const RunConfig& c);

/// STEP_DIR/model.safetensors: a checkpoint's weights.
std::string checkpoint_weights_path(const std::string& step_dir);

/// The parsed manifest.json of a step directory (resolve_checkpoint's result); ConfigError ("init.resume: ...") when
/// it is unreadable, not JSON or not of kCheckpointFormat.
nlohmann::json read_checkpoint_manifest(const std::string& step_dir);

/// Whether entry `name` of checkpoint directory `dir` (one without `latest`) is what the checkpointer leaves when it
/// is stopped before its first `latest`: .lock, a step-*/ holding a manifest, .tmp-step-*/, latest.tmp.*, and
/// model.safetensors (or its temporary link) where it is one file with such a step's weights (placed just before
/// `latest`). validate_config refuses any other entry there, which the checkpointer would replace or prune.
bool left_before_first_latest(const std::string& dir, const std::string& name);

/// Whether checkpoint directory `dir` holds a step-*/ of the same step and weights as `step_dir` (the manifests'
/// step and CRC-32 of model.safetensors): `step_dir` is one of its steps, or a copy of one (cp -r, cp -a). False
/// where either manifest is unreadable or has no checksums.
bool holds_step_of(const std::string& dir, const std::string& step_dir);

/// Checks, before any work, that `c.init.resume` can continue the run `c` on `world_size` ranks: a complete checkpoint
/// (resolve_checkpoint), the same model dims and precision, a step below the run's total steps (bench.warmup_steps +
/// measure_steps counts from step 0, the steps before the resume included); job train, phase train_step and no
/// init.weights beside it are validate_config's rules. Raises ConfigError starting with "init.resume:". Differences
/// that a resume can carry (optimizer, data, strategy, world size) are allowed; they are appended to `warnings` when
/// given, as is a checkpoint without checksums. Each file the manifest lists must have the size it records (the CRC-32s
/// are checked where the files are read).
void check_resume(const RunConfig& c, std::vector<std::string>* warnings = nullptr, int world_size = 0);

/// The advice that ends a resume's error about a damaged checkpoint file.
inline constexpr const char* kResumeElsewhere = "resume from another checkpoint (a step directory can be named)";
/// What a resume's error about a file that its manifest lists (at the size it records) but that does not parse
/// ends with.
inline const std::string kDamagedHint =
    " (the manifest lists this file at this size: damaged after the checkpoint was written? resume from another "
    "checkpoint; a step directory can be named)";

/// A written file's entry in the manifest's "files": {"bytes", "crc32", "block_bytes", "block_crc32": [one for each
/// block, in order]} (what read_checkpoint_manifest validates and verify_checkpoint_file compares with).
nlohmann::json checkpoint_file_entry(const FileDigest& written);

/// How a resume reads file `name` of the checkpoint with manifest `m` for verify_checkpoint_file: in blocks of
/// `block_bytes` (the manifest's; kChecksumBlockBytes where it records none), or `whole` where its entry has the
/// whole file's CRC-32 only (this format's first form).
struct CheckpointRead {
  uint64_t block_bytes = kChecksumBlockBytes;
  bool whole = false;
};
CheckpointRead checkpoint_read_of(const nlohmann::json& m, const std::string& name);

/// Checks a file of step directory `step_dir` as read (`got`: its size, and its whole CRC-32 and / or those of the
/// blocks read) against what the manifest `m` recorded when it was written (m["files"][name]). ConfigError starting
/// with "init.resume:" naming the file (and the block's bytes) when they differ. Returns false, checking nothing, for
/// a manifest without "files" (written before checksums).
bool verify_checkpoint_file(const nlohmann::json& m, const std::string& step_dir, const std::string& name,
                            const FileDigest& got);

/// 64-bit FNV-1a of `text`, as "fnv1a64:<16 hex digits>" (the manifest's config_hash).
std::string fnv1a64_hex(const std::string& text);

/// Rank 0 of a run that holds DIR's lock: where DIR/model.safetensors is a hard link to another step's weights than
/// the step `latest` names (a process ended between commit() placing the one and writing the other), links it to
/// latest's. Returns that step directory when it did, "" otherwise (nothing to mend, no `latest`, or a filesystem
/// without hard links, where DIR/model.safetensors is a copy). RuntimeError when it cannot rename.
std::string repair_checkpoint_weights(const std::string& dir);

/// A checkpoint being written: every rank calls the same methods in the same order (rank 0 does the directory work;
/// the others wait for it where they must). Not collective itself: the caller orders the ranks (barriers).
class CheckpointWrite {
 public:
  /// Rank 0 (is_root): removes a stale DIR/.tmp-<name> and creates it (and DIR). RuntimeError on failure.
  CheckpointWrite(std::string dir, int64_t step, bool is_root);
  /// Rank 0: a write that was not committed (it failed: a full disk, say) removes its temporary directory, once
  /// files_done() said no rank writes into it any more (else the next commit prunes it as stale).
  ~CheckpointWrite();
  /// Every rank has written its files (or failed and agreed so): see the destructor.
  void files_done() { files_done_ = true; }
  CheckpointWrite(const CheckpointWrite&) = delete;
  CheckpointWrite& operator=(const CheckpointWrite&) = delete;
  /// Path of a file inside the temporary directory.
  std::string file(const std::string& name) const;
  /// Rank 0 only: writes manifest.json, fsyncs the directory, renames it to its step name, re-links
  /// DIR/model.safetensors to its weights, points `latest` at it and prunes older checkpoints: it keeps the new one and `parent` (the step
  /// directory in DIR this run continued from: the one it resumed from or its previous write), or where `parent` is
  /// empty or gone, the one `latest` named before. Returns the step directory's path.
  std::string commit(const nlohmann::json& manifest, const std::string& parent = "");
  const std::string& tmp_dir() const { return tmp_; }

 private:
  std::string dir_, name_, tmp_;
  bool root_ = false, committed_ = false, files_done_ = false;
};

/// Reads byte ranges of tensors of a safetensors file without reading the whole file (pread): the optimizer shards
/// of a resume, of which a rank needs only the ranges it owns now.
class SafetensorsSlices {
 public:
  /// Opens `path` and parses its header. ConfigError naming the file when it is unreadable or malformed.
  explicit SafetensorsSlices(const std::string& path);
  ~SafetensorsSlices();
  SafetensorsSlices(const SafetensorsSlices&) = delete;
  SafetensorsSlices& operator=(const SafetensorsSlices&) = delete;
  bool has(const std::string& name) const;
  /// The tensor's safetensors dtype name ("F32", "BF16") and element count; ConfigError when absent.
  std::string dtype(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  /// Elements [begin, begin + count) of tensor `name` (flattened).
  struct Slice {
    std::string name;
    int64_t begin = 0, count = 0;
  };
  /// Receives bytes [at, at + n) of slice i (element size x count bytes in all), in pieces, in file order.
  using Sink = std::function<void(size_t i, uint64_t at, const char* data, uint64_t n)>;
  /// Reads, in order, each block of block_bytes that holds a byte of a slice or of the header (every block where
  /// `whole`), once:
  /// hands each slice's bytes to `sink` on the way and returns the file's size, the CRC-32 of each block read and,
  /// where `whole`, the file's. A rank that needs part of a file reads and checks only the blocks around it.
  /// ConfigError when a slice is outside its tensor or the read fails.
  FileDigest stream(const std::vector<Slice>& slices, const Sink& sink, uint64_t block_bytes = kChecksumBlockBytes,
                    bool whole = false) const;
  /// The whole file's size and CRC-32s: every block, no slice.
  FileDigest digest(uint64_t block_bytes = kChecksumBlockBytes) const { return stream({}, {}, block_bytes, true); }

 private:
  struct Entry {
    std::string dtype;
    int64_t numel = 0;
    uint64_t offset = 0;  // bytes from the start of the file
    size_t esize = 0;
  };
  const Entry& entry(const std::string& name) const;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0, header_end_ = 0;  // the file's bytes; the header's end (8 + its length)
  std::vector<std::pair<std::string, Entry>> entries_;
};

}  // namespace trainer
