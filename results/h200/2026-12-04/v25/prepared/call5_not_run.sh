#!/bin/bash
# v25 call5: the first-store protocol's second form (ticket before the tile's wait, ready bit after the next tile's
# wait): ncu of production (first store) against the variant of the same configuration (dq_accum zeroed) at the
# four shapes (call4's), float64 checks, rounds, memcheck / synccheck of the smoke run, the [flash] and [cuda] tests,
# an xl step.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_fs2.tar.xz
xz -dc .dev/trainer.xz > .dev/bin/trainer; xz -dc .dev/unit_tests.xz > .dev/bin/unit_tests; chmod +x .dev/bin/*
cp .dev/call5.sh $R/run.sh; cp .dev/bwd_calls.py $R/
L=$PWD/flash_fs2/libflashbench.so
log unpacked
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
prof() { local sh=$1 v=$2 rep=$3; for var in 0 $v; do n="ncu_v${var}_$(echo $sh | tr ' ' x)_$rep"
  timeout 60 ncu --kernel-name regex:"flash_bwd" --launch-skip 3 --launch-count 6 $M python3 .dev/bwd_calls.py $L $sh 3 $var > $R/$n.txt 2>&1; log "$n rc $?"; done; }
prof "1 16384 16 128" 10 1; prof "4 512 32 80" 20 1; prof "4 2048 32 80" 20 1; prof "4 512 12 64" 7 1
prof "1 16384 16 128" 10 2; prof "4 512 32 80" 20 2
tar czf $OUT/r.tgz -C $OUT r
timeout 60 python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd '' --bwd 7,10,20,31 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 60 compute-sanitizer --tool memcheck flash_fs2/smoke > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 60 compute-sanitizer --tool synccheck flash_fs2/smoke > $R/synccheck.log 2>&1; log "synccheck rc $?"
timeout 150 .dev/bin/unit_tests "[flash]" > $R/flash_tests.log 2>&1; log "flash tests rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 90 .dev/bin/unit_tests "[cuda]" > $R/cuda_tests.log 2>&1; log "cuda tests rc $?"
timeout 60 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl1 --set output.results=$R/xl1.json --set bench.warmup_steps=3 --set bench.measure_steps=10 > $R/xl1.log 2>&1; log "xl1 rc $?"
timeout 30 python3 launch/flash_bench/sustain.py --lib $L --pass bwd --seconds 5 --out $R/sustain > $R/sustain.log 2>&1; log "sustain rc $?"
tar czf $OUT/r.tgz -C $OUT r
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 40 ]; then timeout $left python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd '' --bwd 7,10,20,31 --rounds 11 --no-check --xl --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $? (limit $left)"; fi
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, re, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/ncu_*.txt")):
    ks, cur = {}, None
    for line in open(f):
        if "flash_bwd" in line:
            cur = next((k for k in ("preprocess", "convert", "sm90_kernel") if k in line), "?")
        m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
        if m and cur:
            v = float(m.group(2).replace(",", "")) * (1e-3 if m.group(1) == "ns" else 1e3 if m.group(1) == "ms" else 1)
            ks.setdefault(cur, []).append(v)
    print(os.path.basename(f)[:-4], {k: [round(x, 1) for x in v] for k, v in ks.items()}, "sum/call", round(sum(sum(v) for v in ks.values()) / 2, 1))
try:
    d = json.load(open(R + "/xl1.json")); print("xl1 step", d["timing"]["step"]["median_ms"], "peak GiB", d["memory"]["peak_bytes"] / 2**30)
except Exception as e: print("xl1 ?", e)
PY
grep -E "cases|worst|FAIL" $R/check.log | head -8
grep -E " bwd " $R/rounds.log
grep -E "ERROR SUMMARY" $R/*check.log
tail -2 $R/flash_tests.log; tail -2 $R/cuda_tests.log; tail -9 $R/sustain.log
cat $R/progress.log
