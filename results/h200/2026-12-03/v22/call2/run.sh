#!/bin/bash
# v22 call2: the persistent forward in production (sm90.cu): float64 checks and bits against the one-CTA-a-tile
# loops; racecheck / memcheck of the smoke run (now with persistent forwards of more tiles than SMs); every [cuda]
# unit test of the trainer build; forward (+ backward) rounds against SDPA.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_p.tar.xz && tar xJf .dev/newbins.tar.xz
cp .dev/call2.sh $R/run.sh
C=.dev/flash_p/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 6,0,15,10,24,20,34,32 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 90 compute-sanitizer --tool racecheck .dev/flash_p/smoke > $R/racecheck.log 2>&1; log "racecheck rc $?"
timeout 90 compute-sanitizer --tool memcheck .dev/flash_p/smoke > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 0,10,20 --bwd 7 --rounds 15 --xl --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL|differ|bit for bit" $R/check.log | head -20
tail -2 $R/racecheck.log; tail -2 $R/memcheck.log; tail -3 $R/unit_cuda.log
tail -40 $R/rounds.log
cat $R/progress.log
