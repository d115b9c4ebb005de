#include "jobs/train_setup.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/memory.h"
#include "core/test_hooks.h"
#include "io/checkpoint.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "optim/adamw.h"

namespace trainer {

HostTimeout checkpoint_wait(const ParallelCfg& p) {
  if (p.comm_timeout_s > p.checkpoint_timeout_s) return {p.comm_timeout_s, "parallel.comm_timeout_s"};
  return {p.checkpoint_timeout_s, "parallel.checkpoint_timeout_s"};
}

namespace {

/// Collective: every rank resolved init.resume to the same step (each read 'latest' itself; a run writing into that
/// directory meanwhile could move it between their reads). ConfigError on every rank otherwise, before any read.
void agree_on_resumed_step(Communicator& comm, const std::string& step_dir, const nlohmann::json& manifest) {
  // the step and the directory (a directory may hold two checkpoints of one step: step-N and step-N.1)
  struct Resolved {
    int64_t step;
    uint64_t dir_hash;  // of the path (every rank has the same init.resume text)
  };
  const Resolved mine{manifest.value("step", int64_t(-1)), fnv1a64(step_dir)};
  std::vector<Resolved> all(size_t(comm.size()));
  comm.all_gather_host(&mine, sizeof mine, all.data());
  for (int r = 0; r < comm.size(); ++r)
    CONFIG_CHECK(all[size_t(r)].step == mine.step && all[size_t(r)].dir_hash == mine.dir_hash,
                 "init.resume: rank {} resolved it to '{}' (step {}) and rank {} to another checkpoint (step {}): its "
                 "'latest' changed while the ranks started (is another run writing there?); name the step directory "
                 "to resume", comm.rank(), step_dir, mine.step, r, all[size_t(r)].step);
}

// Collective, after every rank read `path` itself (its own copy where nodes do not share storage). The job ends as
// first_failure agrees: out of memory on every rank where any rank's read was, else a ConfigError. A rank whose read
// failed so (`failed`; `oom`: out of host memory) throws its own error after this; the others (a rank that failed
// otherwise logs its error) throw "rank r: its error" (rank 0's line is the one the user sees), so no rank goes on to
// a collective the failed one never joins. Where every read succeeded,
// the copies must be one file: ddp and zero1 would take rank 0's weights (broadcast_weights) and fsdp each rank's shard
// of its own file, a mix that trains without an error. Compares each rank's size and CRC-32 (the read's digest): the
// same ConfigError on every rank.
void same_read_on_every_rank(Communicator& comm, const char* key, const std::string& path,
                             const std::exception_ptr& failed, bool oom, const FileDigest& digest) {
  std::string why;
  if (failed) try {
      std::rethrow_exception(failed);
    } catch (const std::exception& e) {
      why = e.what();
    }
  if (const auto f = first_failure(comm, why, oom)) {
    if (failed && oom == f->oom) return;  // this rank's own error follows: the kind every rank ends with
    if (failed) spdlog::error("{}", why);  // another rank's out-of-memory is the job's end: this one's is logged
    const std::string msg = comm.rank() == 0 ? fmt::format("rank {}: {}", f->rank, f->message)
                                             : fmt::format("{}: rank {} could not read '{}'", key, f->rank, path);
    if (f->oom) throw OutOfMemory(msg);  // one status on every rank: oom where some rank ran out of memory
    throw ConfigError(msg);
  }
  struct Read {
    uint64_t bytes;
    char crc32[8];
  };
  Read mine{digest.bytes, {}};
  std::memcpy(mine.crc32, digest.crc32.data(), std::min(digest.crc32.size(), sizeof mine.crc32));
  std::vector<Read> all(size_t(comm.size()));
  comm.all_gather_host(&mine, sizeof mine, all.data());
  const auto text = [](const Read& r) { return fmt::format("{} bytes, CRC-32 {}", r.bytes, std::string(r.crc32, 8)); };
  for (int r = 1; r < comm.size(); ++r)
    CONFIG_CHECK(text(all[size_t(r)]) == text(all[0]), "{}: '{}' differs between ranks: rank 0 read {}, rank {} {} "
                 "(each rank reads the path itself: every node needs the same file)", key, path, text(all[0]), r,
                 text(all[size_t(r)]));
}

}  // namespace

TrainSetup setup_training(const RunConfig& cfg, Backend& be, Communicator* comm, int world_size, bool init_weights) {
  TrainSetup s;
  s.dims = model_dims(cfg.model);
  // Activations: bf16 for bf16 / bf16_pure on cuda (the cpu backend computes in fp32); weights, gradients and
  // AdamW state: bf16 only for bf16_pure (emulated on the cpu).
  const DType act = bf16_precision(cfg.precision) && cfg.device == "cuda" ? DType::bf16 : DType::f32;
  const DType param = bf16_storage(cfg.precision) ? DType::bf16 : DType::f32;
  const AttnImpl attn = cfg.attention == "flash2" ? AttnImpl::flash2 : AttnImpl::naive;
  const int T = s.dims.context_length;
  s.rows_per_rank = cfg.data.batch_size / world_size;
  const int micro = cfg.data.microbatch_size > 0 ? cfg.data.microbatch_size : s.rows_per_rank;
  s.rank_tokens = int64_t(s.rows_per_rank) * T;
  s.shape.n_micro = s.rows_per_rank / micro;
  s.shape.micro = micro;
  s.shape.seq_len = T;
  s.shape.global_tokens = int64_t(cfg.data.batch_size) * T;
  s.shape.backward = phase_has_backward(cfg.bench);
  s.shape.optimizer = cfg.bench.phase == "train_step";

  s.strategy = make_strategy(cfg, be, comm);
  // A forward-only run holds no gradient buffer, and a run without updates no AdamW state (below): what a forward
  // or a forward + backward needs, as in PyTorch, where .grad and the optimizer's state appear at their first use
  const ParamStorage storage(s.strategy->full_params(), s.strategy->full_grads() && s.shape.backward, param);
  s.model = std::make_unique<Model>(be, s.dims, act, attn, ParamLayout::kAlign * world_size, storage,
                                    ActivationPolicy::from(cfg.checkpointing));
  if (init_weights) {  // the weight source; a sharded strategy copies its shards from it in attach()
    const auto t0 = std::chrono::steady_clock::now();
    if (cfg.init.weights || cfg.init.resume) {
      // the step to resume as load_config resolved it: the optimizer state is read from the same step directory and
      // manifest (train_checkpoint.h), so a 'latest' rewritten meanwhile cannot mix two steps
      const std::string step_dir = cfg.init.resume ? resume_step_dir(cfg) : "";
      const nlohmann::json manifest = cfg.init.resume ? read_checkpoint_manifest(step_dir) : nlohmann::json();
      if (cfg.init.resume)  // info: rank 0's log (every rank's with --log-all-ranks)
        spdlog::info("init.resume: step {} in {}", manifest.value("step", int64_t(-1)), step_dir);
      if (cfg.init.resume && comm) {  // ranks reach it apart as their reads of 'latest' do (shared storage)
        const ScopedHostTimeout wait_for_reads(*comm, checkpoint_wait(cfg.parallel));
        agree_on_resumed_step(*comm, step_dir, manifest);
      }
      const std::string path = cfg.init.weights ? *cfg.init.weights : checkpoint_weights_path(step_dir);
      std::map<std::string, HostTensor> file;
      FileDigest digest;
      if (manifest.contains("files"))  // info: rank 0's log (every rank's with --log-all-ranks)
        spdlog::info("init.resume: reading {} and checking its CRC-32 ...", path);
      const char* key = cfg.init.weights ? "init.weights" : "init.resume";
      std::exception_ptr failed;  // this rank's read's error, thrown once the ranks have compared their reads
      bool oom = false;
      try {
        test_bad_alloc("TRAINER_TEST_WEIGHTS_OOM_RANK", comm ? comm->rank() : 0);
        file = read_safetensors(path, nullptr, &digest);
      } catch (const ConfigError& e) {  // name the key, as the loader's and the resume's other errors do
        // a checkpoint's file at its recorded size that does not parse was damaged after it was written
        failed = std::make_exception_ptr(ConfigError(fmt::format(
            "{}: {}{}", key, e.what(), manifest.contains("files") ? kDamagedHint : std::string())));
      } catch (const std::bad_alloc&) {  // each rank holds the whole file while it loads: an oom record, exit 3
        std::error_code ec;
        const uintmax_t bytes = std::filesystem::file_size(path, ec);
        failed = std::make_exception_ptr(OutOfMemory(fmt::format(
            "host memory: reading {} '{}' ({}), which each rank holds whole while it loads", key, path,
            ec ? std::string("size unknown") : format_bytes(size_t(bytes)))));
        oom = true;
      }
      if (comm) {  // each rank read the whole file: on shared storage they end apart. The slowest is waited for
                   // here, as long as for a checkpoint's write, before any collective that waits comm_timeout_s
        const ScopedHostTimeout wait_for_reads(*comm, checkpoint_wait(cfg.parallel));
        if (comm->rank() == comm->size() - 1)  // the last rank's read held up
          test_pause("TRAINER_TEST_IO_PAUSE_S", "after reading the weights");
        same_read_on_every_rank(*comm, key, path, failed, oom, digest);
      }
      if (failed) std::rethrow_exception(failed);
      // From here every rank holds the same bytes, so the checks below end every rank alike
      if (cfg.init.resume)  // the weights as the checkpoint wrote them (its manifest's CRC-32)
        verify_checkpoint_file(manifest, step_dir, std::filesystem::path(path).filename().string(), digest);
      s.model->load(std::move(file), path, key);
      s.resume_dir = step_dir;
      s.resume_manifest = manifest;
      s.weights_read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else {
      s.model->init_random(cfg.init.seed);
    }
  }
  s.strategy->attach(*s.model);
  if (s.shape.optimizer) s.strategy->optimizer_state().adamw->allocate_state();  // at set-up, as the weights
  s.model->release_weight_source();
  s.model->reserve(micro, T);
  return s;
}

}  // namespace trainer
