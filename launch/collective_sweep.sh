#!/usr/bin/env bash
# Collective bandwidth sweep (issue 4): configs/collective_bench.json on 2, 4 and 6 ranks (where available) with one
# communicator, then one combined table (size, time, algbw, busbw per nccl-tests, #wrong) from the result records
# and a plot of bus bandwidth against size (OUT/busbw.png; launch/plot.py collective).
#
#   launch/collective_sweep.sh                          comm auto (nccl on a GPU machine, else mpi), ranks 2 4 6
#   COMM=mpi NPS="2 4" launch/collective_sweep.sh --set collective.sizes_mb=[1,10]
#   TRAINER=build/trainer OUT=results/collective launch/collective_sweep.sh
#
# A rank count is skipped when it exceeds the GPUs (comm nccl: one rank per GPU). Extra arguments go to the trainer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
trainer=${TRAINER:-$root/build/trainer}
comm=${COMM:-auto}
out=${OUT:-$root/results/collective/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

gpus=0
command -v nvidia-smi >/dev/null 2>&1 && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
records=()
for np in ${NPS:-2 4 6}; do
  if [[ "$comm" == nccl || ( "$comm" == auto && $gpus -gt 0 ) ]] && (( np > gpus )); then
    echo "# skipped: $np ranks > $gpus GPUs (comm nccl needs one GPU per rank)" >&2
    continue
  fi
  rec="$out/collective_np$np.json"
  "$here/mpirun.sh" "$np" "$trainer" "$root/configs/collective_bench.json" --set "parallel.comm=$comm" \
    --set "output.results=$rec" "$@" >"$out/collective_np$np.log" 2>&1 ||
    { echo "# $np ranks failed: see $out/collective_np$np.log" >&2; continue; }
  records+=("$rec")
done
[[ ${#records[@]} -gt 0 ]] || { echo "no run succeeded" >&2; exit 1; }

python3 - "${records[@]}" <<'PY'
import json, sys
rows = []
for path in sys.argv[1:]:
    r = json.load(open(path))
    cb = r["collective_bench"]
    for x in cb["results"]:
        rows.append((x["op"], cb["nranks"], cb["comm"], x))
machine = json.load(open(sys.argv[1])).get("machine", {})
print(f"# collective sweep  ({machine.get('host', '?')}, {json.load(open(sys.argv[1])).get('backend', '?')})")
print(f"# {'op':>14} {'ranks':>5} {'comm':>4} {'size':>12} {'time':>10} {'max':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}")
print(f"# {'':>14} {'':>5} {'':>4} {'(B)':>12} {'(us)':>10} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>6}")
for op, n, comm, x in sorted(rows, key=lambda t: (t[0], t[1], t[3]["size_bytes"])):
    print(f"  {op:>14} {n:>5} {comm:>4} {x['size_bytes']:>12} {x['time_us']:>10.1f} {x['time_us_max']:>10.1f} "
          f"{x['algbw_gbs']:>8.2f} {x['busbw_gbs']:>8.2f} {x['wrong']:>6}")
PY
# the same as a plot (bus bandwidth against size, a line per op and rank count), where matplotlib is there
if /usr/bin/env python3 "$here/plot.py" collective "${records[@]}" -o "$out/busbw.png" 2>"$out/plot.log"; then
  echo "# plot: $out/busbw.png"
else
  echo "# no plot ($(tail -1 "$out/plot.log"))"
fi
echo "# records and logs: $out"
