// Training checkpoints of the train job: see train_checkpoint.h (what is saved) and io/checkpoint.h (the files).
#include "jobs/train_checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <memory>
#include <new>
#include <mutex>
#include <thread>

#include "backend/bf16.h"
#include "build_info.h"
#include "core/memory.h"
#include "core/test_hooks.h"
#include "dist/communicator.h"
#include "io/checkpoint.h"
#include "io/result_record.h"
#include "io/safetensors.h"
#include "jobs/train_setup.h"
#include "optim/adamw.h"
#include "optim/schedule.h"

namespace trainer {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string shard_file(int rank) { return fmt::format("optim-rank{:05d}.safetensors", rank); }

/// Whether `e` is a lack of memory: of the device (OutOfMemory) or of the host (std::bad_alloc).
bool out_of_memory(const std::exception& e) {
  return dynamic_cast<const OutOfMemory*>(&e) != nullptr || dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
}


}  // namespace

namespace {

// Rank 0: the output.checkpoint lock this process holds (at most one), kept apart from the checkpointer so that main()
// can end it on whichever thread ends the run (remove_new_checkpoint_dir).
struct HeldLock {
  std::mutex m;
  int fd = -1;        // DIR/.lock, flock'ed
  fs::path dir;       // DIR, absolute
  fs::path created;   // the outermost directory this run made for it ("": DIR existed)
};
HeldLock& held_lock() {
  static HeldLock h;
  return h;
}

std::string in_use_message(const std::string& dir, const std::string& holder, const std::string& lock) {
  return fmt::format("output.checkpoint: '{}' is being written by {} (it holds {}); wait for it to end or give "
                     "another directory", dir, holder, lock);
}

}  // namespace

void check_checkpoint_dir_not_in_use(const std::string& dir) {
  const std::string lock = (fs::path(dir) / ".lock").string();
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // (a FIFO there must not block)
  if (fd < 0) return;  // no lock file (or none readable): the checkpointer decides
  const bool busy = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  const std::string holder = busy ? lock_holder(fd) : std::string();
  ::close(fd);  // (drops the probe's lock where it got one)
  if (busy) throw ConfigError(in_use_message(dir, holder, lock));
}

void remove_new_checkpoint_dir() {
  HeldLock& h = held_lock();
  const std::lock_guard<std::mutex> guard(h.m);
  if (h.fd < 0) return;
  if (!h.created.empty()) {
    std::error_code ec;
    std::vector<fs::path> entries;
    for (auto it = fs::directory_iterator(h.dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      entries.push_back(it->path().filename());
    // Unlinked while the lock is still held: a run that opened it meanwhile finds it taken, and one that opens it
    // later makes a new .lock (then the directory is not empty and stays).
    if (!ec && entries == std::vector<fs::path>{".lock"} && is_file_at(h.fd, (h.dir / ".lock").string()))
      ::unlink((h.dir / ".lock").c_str());
  }
  ::close(h.fd);
  h.fd = -1;
  remove_created_dirs(h.dir, h.created);  // while empty
}

TrainCheckpointer::TrainCheckpointer(const RunConfig& cfg, Backend& be, Model& model, Strategy& strategy,
                                     Communicator& comm, int64_t total_steps)
    : cfg_(cfg), be_(be), model_(model), strategy_(strategy), comm_(comm), total_steps_(total_steps),
      exceptions_at_start_(std::uncaught_exceptions()) {
  if (!cfg.output.checkpoint) return;
  const std::string dir = *cfg.output.checkpoint, lock = (fs::path(dir) / ".lock").string();
  bool busy = false;
  std::string holder = "another run";
  if (comm.rank() == 0) {
    HeldLock& h = held_lock();
    const std::lock_guard<std::mutex> guard(h.m);
    std::error_code ec;
    const fs::path created = first_missing_dir(dir);
    int fd = -1;
    for (int attempt = 0; attempt < 5; ++attempt) {  // again while the file we locked is no longer DIR/.lock
      fs::create_directories(dir, ec);  // a failure shows at the open below (or at the first write)
      fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      int locked = fd >= 0 ? ::flock(fd, LOCK_EX | LOCK_NB) : 0, why = locked != 0 ? errno : 0;
      // Held: again for 0.2 s, past another starting run's probe (check_checkpoint_dir_not_in_use: microseconds)
      for (int i = 0; locked != 0 && why == EWOULDBLOCK && i < 10; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        locked = ::flock(fd, LOCK_EX | LOCK_NB);
        why = locked != 0 ? errno : 0;
      }
      if (locked != 0 && why != EWOULDBLOCK) {  // a filesystem without flock (some NFS): run unguarded, say so
        spdlog::warn("output.checkpoint: cannot lock '{}' ({}); nothing keeps a second run out of this directory",
                     lock, std::strerror(why));
        ::close(fd);
        fd = -1;
      } else if (locked != 0) {
        holder = lock_holder(fd);
        ::close(fd);
        fd = -1;
        busy = true;
      } else if (fd >= 0 && !is_file_at(fd, lock)) {
        ::close(fd);
        fd = -1;
        busy = attempt == 4;  // it keeps changing under us: another run is at it
        continue;
      }
      break;
    }
    if (fd >= 0) {  // who holds it, for the message of the next run that finds it taken
      const std::string pid = fmt::format("{}\n", ::getpid());
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
        // the lock holds without the pid in it
      }
      if (h.fd >= 0) ::close(h.fd);  // an earlier checkpointer's, left for main() (not in a run: one job a process)
      h.fd = fd;
      h.dir = fs::absolute(dir);
      h.created = created;
      try {  // the directory is this run's now: DIR/model.safetensors back at latest's weights after a crash
        if (const std::string step = repair_checkpoint_weights(dir); !step.empty())
          spdlog::warn("output.checkpoint: '{}/model.safetensors' held another step's weights than latest's (a run "
                       "ended while it completed a checkpoint); it is linked to '{}/model.safetensors' again", dir,
                       step);
      } catch (const std::exception& e) {  // the next checkpoint places it anyway
        spdlog::warn("output.checkpoint: {}", e.what());
      }
      // Resuming a step of this directory: its 'latest' was read with the config, before this lock; a run that held
      // the lock then may have written a later step since. This run continues from the step it resumed (as for an
      // older step named on purpose; check_resume's warning), so that later step goes with the next prune: say so.
      if (cfg.init.resume && !cfg.init.resume_step_dir.empty()) {
        const fs::path resumed = fs::weakly_canonical(cfg.init.resume_step_dir, ec);
        const bool via_latest = fs::weakly_canonical(*cfg.init.resume, ec) != resumed;  // not a step named on purpose
        if (!ec && via_latest && resumed.parent_path() == fs::weakly_canonical(dir, ec) && !ec) {
          std::string now;
          try {
            now = resolve_checkpoint(dir);
          } catch (const ConfigError&) {
          }
          if (!now.empty() && fs::weakly_canonical(now, ec) != resumed)
            spdlog::warn("output.checkpoint: '{}/latest' names '{}' now, not '{}', which this run resumed (another "
                         "run wrote it while this one started): this run continues from its own step, and its "
                         "checkpoints become the latest ('{}' is pruned with the older ones)",
                         dir, fs::path(now).filename().string(), resumed.filename().string(),
                         fs::path(now).filename().string());
        }
      }
    }
  }
  if (const auto f = first_failure(comm, busy ? in_use_message(dir, holder, lock) : "", false))
    throw ConfigError(f->message);  // rank 0's, naming the holder
}

TrainCheckpointer::~TrainCheckpointer() {
  // Ending by an exception (bad input found later, a run error): the lock stays held for main(), which removes a
  // directory this run made when the run ends without output (remove_new_checkpoint_dir); the kernel drops it when
  // the process ends. Otherwise it is dropped here; the file stays (unlinking it unlocked would race another run).
  if (std::uncaught_exceptions() > exceptions_at_start_) return;
  HeldLock& h = held_lock();
  const std::lock_guard<std::mutex> guard(h.m);
  if (h.fd >= 0) ::close(h.fd);
  h.fd = -1;
}

bool TrainCheckpointer::due(int64_t steps_done) const {
  const int every = cfg_.output.checkpoint_every;
  return cfg_.output.checkpoint && every > 0 && steps_done % every == 0 && !written(steps_done);
}

void TrainCheckpointer::agree(const std::string& err, const char* what, bool oom) {
  const auto f = first_failure(comm_, err, oom);
  if (!f) return;
  const bool own = !err.empty() && oom == f->oom;  // this rank failed as every rank ends: its own message
  if (!err.empty() && !own) spdlog::error("checkpoint: {} failed: {}", what, err);
  const std::string msg = own ? fmt::format("checkpoint: {} failed: {}", what, err)
                              : fmt::format("checkpoint: {} failed on rank {}: {}", what, f->rank, f->message);
  if (f->oom) throw OutOfMemory(msg);  // one status on every rank: oom where some rank ran out of memory
  throw RuntimeError(msg);
}

void TrainCheckpointer::write(int64_t steps_done) {
  if (!cfg_.output.checkpoint || written(steps_done)) return;
  const auto t0 = std::chrono::steady_clock::now();
  const ScopedRange phase(be_, "checkpoint", "phase");  // the memory timeline's phase (and an NVTX range)
  const int rank = comm_.rank();
  const bool root = rank == 0;
  // The ranks wait for each other here while one writes more than the rest (rank 0: the weights, 32 GB for the 8B in
  // fp32; at 100 MB/s past comm_timeout_s's 300 s): their host-side collectives wait as checkpoint_wait says
  const ScopedHostTimeout wait_for_writes(comm_, checkpoint_wait(cfg_.parallel));
  if (root)  // a large model's write takes a while (xl: 41 GB): say so before it starts
    spdlog::info("checkpoint after step {}: writing to {} ...", steps_done, *cfg_.output.checkpoint);
  std::string err;
  std::unique_ptr<CheckpointWrite> w;
  try {
    w = std::make_unique<CheckpointWrite>(*cfg_.output.checkpoint, steps_done, root);
  } catch (const std::exception& e) {
    err = e.what();
  }
  agree(err, "creating the directory");  // the others write into rank 0's directory only once it exists
  uint64_t bytes = 0;
  FileDigest weights_digest;  // rank 0's: size and CRC-32 of what it wrote (the manifest's "files")

  // Weights: every rank joins gathered_param where it is collective (sharded weights), for every parameter, whatever
  // happens to rank 0's copies; rank 0 copies each to the host and writes the file. gather_params() makes what the
  // gathers need (fsdp: its buffer), so that nothing between two gathers can fail on one rank and leave the others
  // waiting in the next (for comm_timeout_s, with no word of the cause); its failure is agreed before any gather.
  bool oom = false;  // this rank's failure is out of (device) memory: the run ends as such (status oom, exit 3)
  try {
    strategy_.gather_params();
  } catch (const std::exception& e) {
    err = e.what();
    oom = out_of_memory(e);
  }
  agree(err, "gathering the weights", oom);
  if (root || !strategy_.full_params()) {
    // bf16_pure weights are saved as BF16 (exactly what the model holds), others as F32.
    const bool bf16 = model_.param_dtype() == DType::bf16;
    std::vector<std::vector<float>> host;
    std::vector<std::vector<uint16_t>> host16;
    std::vector<NamedTensor> named;
    host.reserve(model_.layout().params().size());
    host16.reserve(model_.layout().params().size());
    for (const ParamInfo& p : model_.layout().params()) {  // make_plan reads them so too (its checkpoint phase)
      const Tensor t = strategy_.gathered_param(p);  // every rank, every parameter (a collective's failure is fatal)
      if (!root || !err.empty()) continue;
      try {
        test_fail("TRAINER_TEST_WEIGHT_READ_FAIL", p.name);
        std::vector<float> v = download_f32(be_, t);
        if (bf16) {
          std::vector<uint16_t> h(v.size());
          for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_bits::from_f32(v[i]);  // exact: v holds bf16 values
          host16.push_back(std::move(h));
          named.push_back({p.name, DType::bf16, p.shape, host16.back().data()});
        } else {
          host.push_back(std::move(v));
          named.push_back({p.name, DType::f32, p.shape, host.back().data()});
        }
        bytes += uint64_t(p.numel) * dtype_size(named.back().dtype);
      } catch (const std::exception& e) {  // e.g. std::bad_alloc holding the 8B's 32 GB on the host
        err = fmt::format("reading weight {}: {}", p.name, e.what());
        oom = out_of_memory(e);
        named.clear();  // what was copied is not needed any more
        host.clear();
        host16.clear();
      }
    }
    if (root && err.empty()) try {
        test_pause("TRAINER_TEST_IO_PAUSE_S", "before writing the weights");  // rank 0's write held up
        weights_digest =
            write_safetensors(w->file("model.safetensors"), named,
                              {{"format", "pt"}, {"producer", "trainer"}, {"step", std::to_string(steps_done)}});
      } catch (const std::exception& e) {
        if (err.empty()) err = e.what();  // the first failure is the cause
      }
  }

  // This rank's optimizer state, each tensor in its stored dtype.
  const OptimizerState st = strategy_.optimizer_state();
  json shard = nullptr;
  if (root || !st.replicated) {
    std::vector<std::vector<char>> host;
    std::vector<NamedTensor> named;
    host.reserve(st.tensors.size());
    int64_t numel = -1;
    bool copied = false;
    try {  // (a failure here is agreed below, as the writes', so that no rank skips the gather)
      for (const auto& [name, t] : st.tensors) {
        host.emplace_back(t.bytes());
        if (t.bytes()) be_.copy_to_host(host.back().data(), t.data, t.bytes());
        named.push_back({name, t.dtype, {t.numel()}, host.back().data()});
        bytes += t.bytes();
        numel = t.numel();
      }
      copied = true;
    } catch (const std::exception& e) {  // e.g. std::bad_alloc: the host cannot hold this rank's state
      if (err.empty()) err = fmt::format("copying the optimizer state to the host: {}", e.what());
      oom = oom || out_of_memory(e);
    }
    json ranges = json::array();
    for (const FlatRange& r : st.ranges) ranges.push_back({r.flat_begin, r.local_begin, r.count});
    shard = {{"rank", rank}, {"file", shard_file(rank)}, {"numel", numel}, {"ranges", ranges}};
    if (copied) try {
        const FileDigest d = write_safetensors(w->file(shard_file(rank)), named,
                                               {{"producer", "trainer"}, {"rank", std::to_string(rank)}});
        shard["digest"] = checkpoint_file_entry(d);  // moved into the manifest's "files" by rank 0
      } catch (const std::exception& e) {
        if (err.empty()) err = e.what();
      }
  }
  const std::vector<std::string> shards = comm_.gather_host(shard.dump(), /*root=*/0);
  uint64_t all_bytes = bytes;
  comm_.all_reduce_host(&all_bytes, 1, HostOp::sum);
  // This rank is past its writes, and agree() returns or throws only once every rank is: a failure from here on
  // may remove the temporary directory (an exception that skips this leaves it for the next commit's pruning)
  if (w) w->files_done();
  agree(err, "writing the files", oom);

  // Rank 0 completes it: manifest, rename, `latest`; the others wait, so nobody runs on before it exists.
  std::string final_dir;
  if (root) try {
      json tensors = json::object();
      for (const auto& [name, t] : st.tensors) tensors[name] = safetensors_dtype_name(t.dtype);
      json shard_list = json::array();
      json files = {{"model.safetensors", checkpoint_file_entry(weights_digest)}};
      for (const std::string& s : shards)
        if (json j = json::parse(s); !j.is_null()) {
          files[j["file"].get<std::string>()] = j["digest"];
          j.erase("digest");
          shard_list.push_back(j);
        }
      const json config = cfg_;
      const OptimizerCfg& o = cfg_.optimizer;
      std::error_code ec;
      json canonical_data_path = nullptr, data_bytes = nullptr;
      if (cfg_.data.path)
        if (const fs::path cp = fs::weakly_canonical(*cfg_.data.path, ec); !ec) {
          canonical_data_path = cp.string();
          if (const uintmax_t n = fs::file_size(cp, ec); !ec) data_bytes = n;
        }
      json manifest = {
          {"format", kCheckpointFormat},
          {"step", steps_done},
          {"world_size", comm_.size()},
          {"strategy", strategy_.name()},
          {"precision", cfg_.precision},
          {"weights", "model.safetensors"},
          {"files", files},  // each file's size and CRC-32, checked by a resume as it reads them
          {"layout_total", model_.layout().total()},
          {"parameters", model_.layout().count()},
          {"optimizer",
           {{"steps_taken", st.adamw ? st.adamw->steps_taken() : 0},
            {"tensors", tensors},
            {"replicated", st.replicated},
            {"shards", shard_list}}},
          {"schedule",
           {{"next_step", steps_done},
            {"schedule", o.schedule},
            {"lr_next", learning_rate(o, steps_done, total_steps_)},
            {"total_steps", total_steps_},
            {"warmup_steps", o.warmup_steps},
            {"cosine_steps", o.cosine_steps == 0 ? total_steps_ : o.cosine_steps}}},
          {"data",
           {{"next_step", steps_done},
            {"source", cfg_.data.source},
            {"path_canonical", canonical_data_path},  // what a resume's data.path is compared with (check_resume)
            {"path_bytes", data_bytes},               // and its size (a file rewritten in place)
            {"sampling", cfg_.data.sampling},
            {"seed", cfg_.data.seed},
            {"batch_size", cfg_.data.batch_size},
            {"note", "counter-based in (seed, step, row): the step is the sampler's whole position and RNG state"}}},
          {"config", config},
          {"config_hash", fnv1a64_hex(config.dump())},
          {"written", now_iso()},
          {"trainer", build::kVersion}};
      // the finished files held in the temporary directory, so that a test can kill the process mid-write
      test_pause("TRAINER_TEST_CHECKPOINT_PAUSE_S", "before completing the checkpoint");
      final_dir = w->commit(manifest, parent_);
      parent_ = fs::path(final_dir).filename().string();
    } catch (const std::exception& e) {
      if (err.empty()) err = e.what();
    }
  agree(err, "completing it");
  last_written_ = steps_done;
  const double secs = seconds_since(t0);
  writes_.push_back({{"step", steps_done}, {"path", root ? json(final_dir) : json(nullptr)}, {"write_s", secs},
                     {"bytes", all_bytes}});
  if (root)
    spdlog::info("checkpoint after step {} written to {} ({} in {:.2f} s)", steps_done, final_dir,
                 format_bytes(all_bytes), secs);
}

int64_t TrainCheckpointer::resume(const std::string& step_dir, const json& m, double weights_read_s) {
  if (!cfg_.init.resume) return 0;
  TRAINER_CHECK(!step_dir.empty() && m.is_object(), "resume: setup_training resolved no checkpoint");
  const auto t0 = std::chrono::steady_clock::now();
  const json& opt = m["optimizer"];
  if (m.contains("layout_total"))
    CONFIG_CHECK(m["layout_total"].get<int64_t>() == model_.layout().total(),
                 "init.resume: '{}/manifest.json' has layout_total {}, this model's flat parameter layout has {} "
                 "elements (a checkpoint of another model or build, or corrupt)", step_dir,
                 m["layout_total"].get<int64_t>(), model_.layout().total());
  const OptimizerState st = strategy_.optimizer_state();
  int64_t want = 0, covered = 0;
  for (const FlatRange& r : st.ranges) want += r.count;
  try {
    for (const json& shard : opt.at("shards")) {
      // The slices of this file that land in this rank's state, and where: read in one pass with its CRC-32
      const std::string file_name = shard.at("file").get<std::string>();
      std::unique_ptr<SafetensorsSlices> file;  // opened when one of its ranges overlaps one of this rank's
      std::vector<SafetensorsSlices::Slice> slices;
      std::vector<char*> dst;  // slice i's destination in device (or host) memory
      for (const json& q : shard.at("ranges")) {
        const int64_t qf = q.at(0), ql = q.at(1), qc = q.at(2);
        for (const FlatRange& r : st.ranges) {
          const int64_t lo = std::max(qf, r.flat_begin), hi = std::min(qf + qc, r.flat_begin + r.count);
          if (lo >= hi) continue;
          if (!file) try {
              file = std::make_unique<SafetensorsSlices>((fs::path(step_dir) / file_name).string());
            } catch (const ConfigError& e) {  // a header that does not parse, at the size the manifest records
              throw ConfigError(std::string(e.what()) + (m.contains("files") ? kDamagedHint : std::string()));
            }
          for (const auto& [name, t] : st.tensors) {
            CONFIG_CHECK(file->dtype(name) == safetensors_dtype_name(t.dtype),
                         "init.resume: optimizer state '{}' is {} in the checkpoint '{}', this run keeps it as {}",
                         name, file->dtype(name), step_dir, safetensors_dtype_name(t.dtype));
            slices.push_back({name, ql + (lo - qf), hi - lo});
            dst.push_back(static_cast<char*>(t.data) + (r.local_begin + (lo - r.flat_begin)) * dtype_size(t.dtype));
          }
          covered += hi - lo;
        }
      }
      if (!file) continue;
      // the blocks of the file around this rank's slices (or the whole file), each checked
      const CheckpointRead how = checkpoint_read_of(m, file_name);
      const FileDigest got = file->stream(slices, [&](size_t i, uint64_t at, const char* data, uint64_t n) {
        be_.copy_from_host(dst[i] + at, data, size_t(n));
      }, how.block_bytes, how.whole);
      verify_checkpoint_file(m, step_dir, file_name, got);  // a damaged block stops the run before any step
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("init.resume: '{}/manifest.json' has a malformed optimizer section ({})", step_dir,
                                  e.what()));
  }
  CONFIG_CHECK(covered == want,
               "init.resume: the optimizer shards of '{}' cover {} of the {} elements of rank {}'s state (a "
               "checkpoint of another model, or corrupt)", step_dir, covered, want, comm_.rank());
  if (st.adamw) st.adamw->set_steps_taken(opt.value("steps_taken", int64_t(0)));
  const int64_t step = m.at("step").get<int64_t>();
  std::error_code ec;  // resumed from a step of the directory it writes to: its writes continue that line
  const fs::path resumed_dir = fs::weakly_canonical(step_dir, ec);
  if (cfg_.output.checkpoint && resumed_dir.parent_path() == fs::weakly_canonical(*cfg_.output.checkpoint, ec))
    parent_ = resumed_dir.filename().string();
  double secs = seconds_since(t0) + weights_read_s;
  {  // the slowest rank's, waited for as long as a checkpoint's write (the ranks' shares of the files differ)
    const ScopedHostTimeout wait_for_reads(comm_, checkpoint_wait(cfg_.parallel));
    comm_.all_reduce_host(&secs, 1, HostOp::max);
  }
  resumed_ = {{"path", step_dir},
              {"step", step},
              {"world_size", m.value("world_size", 0)},
              {"strategy", m.value("strategy", "")},
              {"config_hash", m.value("config_hash", "")},
              // setup_training checked the weights, each rank here the optimizer files it read
              {"checksums", m.contains("files") ? "verified" : "absent (a checkpoint written before checksums)"},
              {"read_s", secs}};
  if (comm_.rank() == 0)
    spdlog::info("resumed from {} (step {}, written by {} rank(s) with {}) in {:.2f} s", step_dir, step,
                 m.value("world_size", 0), m.value("strategy", "?"), secs);
  return step;
}

json TrainCheckpointer::record() const {
  return {{"dir", cfg_.output.checkpoint ? json(*cfg_.output.checkpoint) : json(nullptr)},
          {"every", cfg_.output.checkpoint_every},
          {"writes", writes_},
          {"resumed_from", resumed_}};
}

json TrainCheckpointer::write_seconds() const {
  if (writes_.empty()) return nullptr;
  double s = 0;
  for (const json& w : writes_) s += w["write_s"].get<double>();
  return s;
}

json TrainCheckpointer::read_seconds() const { return resumed_.is_null() ? json(nullptr) : resumed_["read_s"]; }

}  // namespace trainer
