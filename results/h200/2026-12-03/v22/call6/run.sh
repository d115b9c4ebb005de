#!/bin/bash
# v22 call6: production after call5 (d 128's persistent forward with ping-pong) and the review's mends (one slot
# count, the reset's fence): float64 checks and bits, synccheck / racecheck / memcheck of the smoke run, every [cuda]
# unit test, rounds of the production forward + backward against SDPA, and one burst table (production timed first).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_f.tar.xz && tar xJf .dev/ut.tar.xz
cp .dev/call6.sh $R/run.sh
C=.dev/flash_f/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 6,0,16,13,15,24,20,34,32 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
for t in synccheck racecheck memcheck; do timeout 120 compute-sanitizer --tool $t .dev/flash_f/smoke > $R/$t.log 2>&1; log "$t rc $?"; done
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 15 --bwd 7 --rounds 15 --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 120 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 15 --bwd 7 --no-check --out $R/burst > $R/burst.log 2>&1; log "burst rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL|differ|bit for bit" $R/check.log | head -20
for t in synccheck racecheck memcheck; do tail -1 $R/$t.log; done
tail -3 $R/unit_cuda.log
grep -E "T16384" $R/rounds.log
grep -E "T16384" $R/burst.log | grep -v mma
cat $R/progress.log
