// `trainer --help`: usage, options, and one row per config key (default, allowed values, meaning) from schema.h's
// table, the presets, resolution and exit codes. configs/README.md's keys table holds the same rows.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "config/schema.h"
#include "core/errors.h"

namespace trainer {
namespace {

using namespace config_schema;

/// Every leaf key in documentation order: its dotted name, its default as JSON text and its documentation.
struct KeyRow {
  std::string key, def;
  KeyDoc doc;
};
template <Section S>
void key_rows(const S& s, const std::string& prefix, std::vector<KeyRow>& out) {
  fields(s, [&](const char* name, const auto& member, const KeyDoc& doc) {
    using T = std::decay_t<decltype(member)>;
    if constexpr (Section<T>)
      key_rows(member, prefix + name + ".", out);
    else
      out.push_back({prefix + name, to_value(member).dump(), doc});
  });
}

}  // namespace

std::string help_text() {
  std::string s =
      "usage: trainer [CONFIG.json] [--set key.path=value ...] [--print-config] [--log-all-ranks]\n"
      "       trainer --plan [CONFIG.json] [--set ...] [--world-size N] [--device cpu|cuda] [--gpu h200|h100]\n"
      "                      [--device-memory GIB] [--fit] [--json]\n"
      "       trainer --help | --version\n"
      "       mpirun -np N trainer CONFIG.json ...     (one process per GPU; batch_size is split over the N ranks)\n"
      "\n"
      "Trains or benchmarks the CS336 Transformer LM as described by one JSON run config and writes a result\n"
      "record. Without CONFIG.json the embedded default (configs/default.json) is used. Unknown keys are errors.\n"
      "\n"
      "options:\n"
      "  --set key.path=value  override one config key (repeatable, applied in order). The value is JSON\n"
      "                        (3e-4, true, null, [0.9,0.95], {\"num_layers\":2}), else taken as a string;\n"
      "                        array elements by index: --set optimizer.betas.1=0.95\n"
      "  --print-config        print the resolved config as JSON and exit: resolved for this host and 1 rank\n"
      "                        (mpirun's ranks, or --world-size N); as --plan, it checks only the input files\n"
      "                        that exist here\n"
      "  --log-all-ranks       log on every rank (default: rank 0 at info, other ranks at warn)\n"
      "  --plan                run nothing: print the memory plan (bytes by category at the peak, the peak's\n"
      "                        phase and block), FLOPs and predicted step time of one rank of the train run,\n"
      "                        from a dry run of the real code on a meta backend (no GPU needed)\n"
      "  --world-size N        (--plan, --print-config) for N ranks (default 1, or the mpirun world size)\n"
      "  --device cpu|cuda     (--plan) the device to plan for; default: the config's device, and for device\n"
      "                        auto cuda when the config asks for bf16, flash2 or nccl, else cpu\n"
      "  --gpu h200|h100       (--plan) plan a cuda run on this GPU (default h200; implies --device cuda): its\n"
      "                        memory (139.8 / 79.2 GiB) and rates; an H100 80GB gets the H200's measured compute\n"
      "                        rates and its memory-bound ones times 3.35 / 4.8 TB/s (its HBM; checked against\n"
      "                        v31's xl and small). A cuda run uses an H100 80GB's rates on one by itself\n"
      "  --device-memory GIB   (--plan, cuda) the GPU memory to fit in instead of --gpu's: the fits line and\n"
      "                        --fit use it; the rates stay --gpu's\n"
      "  --fit                 (--plan) search the checkpointing settings, each at the run's microbatch\n"
      "                        and its halvings, then the largest LM-head chunk, that fit 93% of the\n"
      "                        memory, fastest first, each as --set arguments; done anyway when the plan\n"
      "                        does not fit\n"
      "  --json                (--plan) print the plan as one JSON object (with --fit or no fit: \"fit\")\n"
      "  --help                print this text and exit\n"
      "  --version             print the version and git commit and exit\n"
      "\n"
      "config keys (key, default, allowed values; configs/README.md has the same table):\n";
  std::vector<KeyRow> rows;
  const RunConfig defaults;
  key_rows(defaults, "", rows);
  size_t key_width = 0;  // the key column fits the longest key (a long default, a list, overflows its column)
  for (const KeyRow& r : rows) key_width = std::max(key_width, r.key.size());
  constexpr size_t default_width = 14;
  std::string section;
  for (const KeyRow& r : rows) {
    const std::string sec = r.key.find('.') == std::string::npos ? "" : r.key.substr(0, r.key.find('.'));
    if (sec != section) s += "\n";
    section = sec;
    s += fmt::format("  {:<{}} {:<{}} {}\n      {}\n", r.key, key_width, r.def, default_width,
                     allowed_text(r.doc.allowed), r.doc.meaning);
  }
  s += "\nmodel presets (vocab, context, d_model, d_ff, layers, heads):\n";
  for (const auto& name : preset_names()) {
    const ModelCfg p = preset_model(name);
    s += fmt::format("  {:<16} {:>6} {:>6} {:>5} {:>6} {:>3} {:>3}\n", name, p.vocab_size, p.context_length, p.d_model,
                     p.d_ff, p.num_layers, p.num_heads);
  }
  s += "\nresolution: model.preset fills the model dims left at 0 (a preset given with --set: every dim not also\n"
       "given with --set); device auto -> cuda if available else cpu; attention auto -> flash2 for bf16 on cuda else\n"
       "naive; parallel.comm auto -> nccl on cuda with a GPU per rank in a build with NCCL, else mpi (with a\n"
       "warning when ranks share a GPU or NCCL is absent: trainer --version says); name \"\" -> config file stem; data.microbatch_size 0 ->\n"
       "batch_size / world_size; optimizer.in_backward null -> true for a train_step run of strategy none or\n"
       "fsdp without clipping, else false; optimizer.in_gemm null -> true for strategy none, device cuda,\n"
       "precision bf16 and in_backward true, else false; gemm_autotune null -> true unless deterministic.\n"
       "Config errors exit with code 2 before any output is written.\n"
       "\nexit codes: 0 ok; 1 the run failed (record status \"error\"); 2 bad input (one line, nothing written);\n"
       "3 out of memory (\"oom\"); 4 interrupted: SIGINT, SIGTERM, SIGHUP (unless ignored, as by nohup), SIGUSR1 or\n"
       "SIGUSR2 (Slurm --signal=USR1@SECONDS) stop job train after the current step on every rank,\n"
       "output.checkpoint is written and the record gets status \"interrupted\"; a second signal stops at once\n"
       "(128 + signal). While a run is going its record says \"running\" (with the pid); the end of the run\n"
       "replaces it.\n";
  return s;
}

}  // namespace trainer
