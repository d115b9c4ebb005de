# The common part of a device-call script: what each results/<machine>/<date>/<version>/callN/run.sh repeated
# before this file (the record folder, a progress log with elapsed seconds, an archive saved after every step,
# binaries unpacked from .dev). Source it from the script that the device runs, from the repository root, with
# $OUT set (the `run` tool's output folder):
#
#   source launch/device_call.sh "$0"      # $0: this script, copied into the record as run.sh
#   unpack_bins trainer unit_tests         # .dev/trainer.xz (or .gz) -> .dev/bin/trainer
#   unpack_tar .dev/flash_new.tar.xz       # e.g. a flash bench library (launch/flash_bench/build.sh)
#   step flash_tests 150 .dev/bin/unit_tests "[flash]"
#   step xl1 120 .dev/bin/trainer configs/xl.json --set device=cuda --set output.results=$R/xl1.json
#
# Sets R ($OUT/r: the record folder, archived as $OUT/r.tgz) and t0 (the start, epoch seconds) and exports
# NCCL_NVLS_ENABLE=0. Functions:
#   log MSG...            "[Ns] MSG" to stdout and $R/progress.log (N: seconds since t0)
#   save                  $OUT/r.tgz from $R; step calls it after each command, so a call killed at its time limit
#                         still returns what finished
#   unpack_bins NAME...   .dev/NAME.xz or .dev/NAME.gz into .dev/bin/NAME, executable; a missing one is an error
#   unpack_tar FILE...    each archive (tar, any compression tar reads) into the repository root
#   step NAME SECONDS CMD...  CMD under `timeout SECONDS`, stdout and stderr to $R/NAME.log; logs "NAME rc N" and
#                         saves; returns CMD's status (124: timed out)
#   left LIMIT            seconds left of a LIMIT-second budget since t0 (for a last step that takes what is left)
#   finish                the last line: save, print summary.log and progress.log, remove $R (r.tgz holds it)
#   train_step NAME CONFIG [ARGS...]   step NAME (120 s): .dev/bin/trainer CONFIG on cuda bf16, record $R/NAME.json
#   peer_step NAME SECONDS [ARGS...]   step NAME: launch/torch_bench.py --mode compiled ARGS, record $R/NAME.json
set -u
if [ -z "${OUT:-}" ]; then
  echo "device_call.sh: OUT is not set (the run tool's output folder)" >&2
  exit 2  # the sourcing script stops here
fi
export NCCL_NVLS_ENABLE=0
R=$OUT/r
mkdir -p "$R" .dev/bin
t0=$(date +%s)
if [ -n "${1:-}" ] && [ -f "$1" ]; then cp "$1" "$R/run.sh"; fi

log() { echo "[$(($(date +%s) - t0))s] $*" | tee -a "$R/progress.log"; }

save() { tar czf "$OUT/r.tgz" -C "$OUT" r; }

unpack_bins() {
  local n
  for n in "$@"; do
    if [ -f ".dev/$n.xz" ]; then
      xz -dc ".dev/$n.xz" > ".dev/bin/$n"
    elif [ -f ".dev/$n.gz" ]; then
      gzip -dc ".dev/$n.gz" > ".dev/bin/$n"
    else
      log "unpack_bins: neither .dev/$n.xz nor .dev/$n.gz"
      return 1
    fi
    chmod +x ".dev/bin/$n"
  done
  log "unpacked $*"
}

unpack_tar() {
  local f
  for f in "$@"; do tar xf "$f" || { log "unpack_tar: $f failed"; return 1; }; done
  log "unpacked $*"
}

step() {
  local name=$1 limit=$2 rc
  shift 2
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  rc=$?
  log "$name rc $rc"
  save
  return $rc
}

left() { echo $(($1 - ($(date +%s) - t0))); }

# The call's last line: the archive, then its summary and progress printed, then the record folder removed (the
# `run` tool returns every file under $OUT and caps how many: v33's folder of many small files pushed a later
# stage's archive out). A call killed at its time limit leaves the folder and the last archive.
finish() {
  save
  cat "$R/summary.log" "$R/progress.log" 2>/dev/null
  rm -rf "$R"
}

# The two runs most calls compare (issue 19's ratios):
train_step() {  # NAME CONFIG [ARGS...]: the trainer (.dev/bin/trainer) on cuda bf16, its record $R/NAME.json
  local n=$1 c=$2
  shift 2
  step "$n" 120 .dev/bin/trainer "$c" --set device=cuda --set precision=bf16 --set name="$n" \
    --set output.results="$R/$n.json" "$@"
}
peer_step() {  # NAME SECONDS [ARGS...]: launch/torch_bench.py --mode compiled ARGS, its record $R/NAME.json
  local n=$1 lim=$2
  shift 2
  step "$n" "$lim" python3 launch/torch_bench.py --mode compiled "$@" --json "$R/$n.json"
}
