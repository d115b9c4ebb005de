#!/bin/bash
# v25 call3: (a) HEAD's library (c437c44): the d 128 backward and forward back to back (sustain.py), then in rounds,
# with nvidia-smi's SM clock and power every 50 ms beside them; (b) the first-store library (dq_accum not zeroed: the
# first contribution to each dQ tile stores it): float64 checks incl. the production backward, rounds prod (first
# store) against variants 7 / 10 / 20 / 31 (zeroing) at the four 16-head shapes and at xl's, memcheck / synccheck of
# the smoke run.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_head.tar.xz; tar xJf .dev/flash_fs.tar.xz
cp .dev/call3.sh $R/run.sh; cp .dev/sustain.py $R/
H=$PWD/flash_head/libflashbench.so; N=$PWD/flash_fs/libflashbench.so
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader -lms 50 > $R/smi.csv 2>&1 &
SMI=$!
log "unpacked; smi $SMI"
sleep 2; log idle
timeout 30 python3 .dev/sustain.py $H bwd 10 $R/sustain_bwd.json > $R/sustain_bwd.log 2>&1; log "sustain bwd rc $?"
sleep 3; log idle
timeout 30 python3 .dev/sustain.py $H fwd 8 $R/sustain_fwd.json > $R/sustain_fwd.log 2>&1; log "sustain fwd rc $?"
sleep 3; log idle
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $H --prod $H --fwd 16 --bwd 10 --rounds 11 --no-check --out $R/rounds_head > $R/rounds_head.log 2>&1; log "rounds head rc $?"
kill $SMI
tar czf $OUT/r.tgz -C $OUT r
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 7,10,20,31 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 7,10,20,31 --rounds 11 --no-check --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 90 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 10,20 --rounds 11 --no-check --xl --out $R/rounds_xl > $R/rounds_xl.log 2>&1; log "rounds xl rc $?"
timeout 60 compute-sanitizer --tool memcheck flash_fs/smoke > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 60 compute-sanitizer --tool synccheck flash_fs/smoke > $R/synccheck.log 2>&1; log "synccheck rc $?"
tar czf $OUT/r.tgz -C $OUT r
tail -1 $R/sustain_bwd.log; tail -1 $R/sustain_fwd.log
grep -E "128 T16384" $R/rounds_head.log
grep -E "cases|worst|FAIL" $R/check.log | head -12
grep -E " bwd " $R/rounds_a.log; grep -E " bwd " $R/rounds_xl.log
grep -E "ERROR SUMMARY" $R/*check.log
cat $R/progress.log
