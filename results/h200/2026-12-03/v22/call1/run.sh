#!/bin/bash
# v22 call1: persistent forward with a dynamic tile counter (FwdTileCounter; variants 6 / 7: d 64, 15: d 128,
# 24 / 25: d 80, 34 / 35: d 96; 7, 25, 35 with 32 producer registers), checked in float64 and bit for bit against
# the production configurations (0, 10, 20, 32) of the same library, then timed in rounds beside them.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_dyn.tar.xz
cp .dev/call1.sh $R/run.sh
C=.dev/flash_dyn/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 0,6,7,10,15,20,24,25,32,34,35 --bwd '' --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 240 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 0,6,7,10,15,20,24,25,32,34,35 --bwd '' --rounds 7 --xl --shapes 4x512x12x64,4x4096x12x64 --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 60 compute-sanitizer --tool racecheck .dev/flash_dyn/smoke > $R/racecheck.log 2>&1; log "racecheck rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|worst|FAIL|differ|bit" $R/check.log | head -20
tail -40 $R/rounds.log
cat $R/progress.log
