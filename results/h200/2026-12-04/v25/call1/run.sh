#!/bin/bash
# v25 call1: the dQ convert inside the Hopper backward (v24's prepared patch) in one library: float64 checks of the
# production backward (fused) and the variants (unfused), rounds prod (fused) against variants 7/10/20/31 (unfused),
# compute-sanitizer of the smoke run.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_fused.tar.xz
cp .dev/call1.sh $R/run.sh
N=flash_fused/libflashbench.so
log unpacked
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 7,10,20,31 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 7,10,20,31 --rounds 11 --no-check --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 10,20 --rounds 11 --no-check --xl --out $R/rounds_xl > $R/rounds_xl.log 2>&1; log "rounds xl rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 80 compute-sanitizer --tool memcheck flash_fused/smoke > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 120 compute-sanitizer --tool racecheck flash_fused/smoke > $R/racecheck.log 2>&1; log "racecheck rc $?"
timeout 80 compute-sanitizer --tool synccheck flash_fused/smoke > $R/synccheck.log 2>&1; log "synccheck rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "cases|worst|FAIL" $R/check.log | head -12
grep -E " bwd " $R/rounds_a.log; grep -E " bwd " $R/rounds_xl.log
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/*check.log
cat $R/progress.log
