#!/bin/bash
# v24 call9 (call8 again, its checks left out): the d 128 backward (with its passes) in rounds, new preprocess (this session) against old (fb4e5e0),
# the libraries swapped between two processes; then float64 checks of the new library with the time left.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_new.tar.xz && tar xJf .dev/flash_old.tar.xz
cp .dev/call9.sh $R/run.sh
O=flash_old/libflashbench.so; N=flash_new/libflashbench.so
log unpacked
timeout 55 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd '' --bwd 10 --rounds 11 --no-check --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 55 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd '' --bwd 10 --rounds 11 --no-check --out $R/rounds_b > $R/rounds_b.log 2>&1; log "rounds b rc $?"
tar czf $OUT/r.tgz -C $OUT r
left=0
if [ $left -gt 20 ]; then timeout $left python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd '' --bwd 7,10,20,31 --no-time --out $R/check_new > $R/check_new.log 2>&1; log "check new rc $? (limit $left s)"; fi
tar czf $OUT/r.tgz -C $OUT r
grep -E "bwd|f\+b|fail|FAIL|cases" $R/rounds_a.log | tail -12; grep -E "bwd|f\+b" $R/rounds_b.log | tail -12; tail -4 $R/check_new.log 2>/dev/null
cat $R/progress.log
