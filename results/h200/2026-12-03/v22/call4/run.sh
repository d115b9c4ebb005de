#!/bin/bash
# v22 call4: persistent variants of the loops that did not pay one CTA a tile: d 128 ping-pong (16) and three K / V
# stages (17), d 64 three stages (8), d 80 two consumers with ping-pong (26); checked against production (15, 6, 24)
# in float64 and bit for bit, then timed in rounds beside production and SDPA; synccheck and racecheck of the smoke
# run (after the review's mends: one slot count for every configuration, a fence before the counters' reset).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_x.tar.xz
cp .dev/call4.sh $R/run.sh
C=.dev/flash_x/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 15,16,17,6,8,24,26 --bwd '' --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 120 compute-sanitizer --tool synccheck .dev/flash_x/smoke > $R/synccheck.log 2>&1; log "synccheck rc $?"
timeout 120 compute-sanitizer --tool racecheck .dev/flash_x/smoke > $R/racecheck.log 2>&1; log "racecheck rc $?"
timeout 240 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 16,17,8,26 --bwd '' --rounds 15 --xl --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 120 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 15,16,17 --bwd '' --no-check --out $R/burst > $R/burst.log 2>&1; log "burst rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL|differ|bit for bit" $R/check.log | head -20
tail -24 $R/rounds.log
grep -E "x128 T16384" $R/burst.log | head
tail -2 $R/synccheck.log $R/racecheck.log
cat $R/progress.log
