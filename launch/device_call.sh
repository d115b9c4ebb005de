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
#   smi_step NAME CONFIG [ARGS...]     train_step with nvidia-smi's SM clock and power every 100 ms in $R/smi_NAME.log
#   record_lines NAME...  a line per record $R/NAME.json that exists: status, step median / mean ms, peak and planned
#                         peak GiB (the summary's table); smi_lines NAME...: each smi log's clock median / min, power max
#   trace_top NAME [N]    the N (20) largest ranges of the traced record $R/NAME.json (profile.trace), ms per step
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
smi_step() {  # NAME CONFIG [ARGS...]
  local n=$1 pid
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$R/smi_$n.log" 2>&1 &
  pid=$!
  train_step "$@"
  kill $pid 2>/dev/null
}

# The summary's pieces (read the records the steps wrote; a missing one is skipped)
record_lines() {  # NAME...
  python3 - "$R" "$@" <<'PY'
import json, os, sys
for n in sys.argv[2:]:
    f = os.path.join(sys.argv[1], n + ".json")
    if not os.path.exists(f):
        continue
    r = json.load(open(f))
    t, m = r.get("timing", {}).get("step", {}), r.get("memory", {})
    planned = (m.get("predicted") or {}).get("peak_bytes") or 0
    print(n, r.get("status"), t.get("median_ms"), t.get("mean_ms"), round((m.get("peak_bytes") or 0) / 2**30, 3),
          "planned", round(planned / 2**30, 3))
PY
}
smi_lines() {  # NAME...
  python3 - "$R" "$@" <<'PY'
import os, sys
for n in sys.argv[2:]:
    f = os.path.join(sys.argv[1], "smi_" + n + ".log")
    if not os.path.exists(f):
        continue
    clk, pw = [], []
    for line in open(f):
        x = [v.strip() for v in line.split(",")]
        try:
            clk.append(float(x[1]))
            pw.append(float(x[2]))
        except (ValueError, IndexError):
            pass
    if clk:
        print(n, f"SM clock median {sorted(clk)[len(clk) // 2]:.0f} / min {min(clk):.0f} MHz, power max {max(pw):.0f} W")
PY
}
trace_top() {  # NAME [N]
  [ -f "$R/$1.json" ] || return 0
  echo "$1 (ms per traced step, largest first):"
  python3 - "$R/$1.json" "${2:-20}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for x in sorted(r["profile"]["ranges"], key=lambda x: -x["ms_per_step"])[:int(sys.argv[2])]:
    print(f"  {x['cat']:>10} {x['name']:<40} {x['ms_per_step']:9.3f} ms {x['calls_per_step']:7.1f} calls")
PY
}
