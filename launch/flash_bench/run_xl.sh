#!/bin/bash
# GPU machine: builds the FlashAttention-2 bench library (build.sh) and runs the d 80 tile-variant comparison at the xl
# shapes (bench.py --xl: check against float64, timing, SDPA); prints the table last. Run from the repository root:
#   JOBS=16 EXTRA_INC=.carry/inc OUT=<dir> bash launch/flash_bench/run_xl.sh
# EXTRA_INC: include folder with the fmt and spdlog headers when the machine has none (a copy of /usr/include/fmt and
# /usr/include/spdlog carried in .carry/inc). Logs: $OUT/build.log, $OUT/bench_xl.log; results:
# $OUT/flash_bench_xl.json, $OUT/xl_table.txt.
set -uo pipefail
OUT=${OUT:-.}
mkdir -p "$OUT"
export JOBS=${JOBS:-16} EXTRA_INC=${EXTRA_INC:-}
command -v nvcc >/dev/null || export PATH=$PATH:/usr/local/cuda/bin
if [ -n "$EXTRA_INC" ] && [ ! -f "$EXTRA_INC/fmt/format.h" ]; then
  echo "EXTRA_INC=$EXTRA_INC has no fmt/format.h" >&2
  exit 2
fi
t0=$(date +%s)
if ! bash launch/flash_bench/build.sh > "$OUT/build.log" 2>&1; then
  echo "build failed ($(( $(date +%s) - t0 )) s); last lines of $OUT/build.log:" >&2
  grep -v "warning #20208\|^$" "$OUT/build.log" | tail -40 >&2
  exit 1
fi
echo "build $(( $(date +%s) - t0 )) s"
t1=$(date +%s)
python3 launch/flash_bench/bench.py --xl --out "$OUT" > "$OUT/bench_xl.log" 2>&1
rc=$?
echo "bench.py --xl rc $rc ($(( $(date +%s) - t1 )) s)"
grep -E "^(xl:|FAIL|ragged checks stopped|Traceback)" "$OUT/bench_xl.log" | head -50
if [ -f "$OUT/xl_table.txt" ] && [ $rc -eq 0 ]; then
  cat "$OUT/xl_table.txt"
else
  tail -60 "$OUT/bench_xl.log"
fi
exit $rc
