#!/bin/bash
# v21 call4: the d 64 backward with two dQ stages (variant 8) against one (7) and call1's production (flash_new as
# --prod), timed in rounds (kernels in turn, 9 rounds, after a warm-up), two processes.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_new.tar.xz && tar xJf .dev/flash_cur.tar.xz
cp .dev/call4.sh $R/run.sh
C=.dev/flash_cur/libflashbench.so; N=.dev/flash_new/libflashbench.so
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $N --fwd "" --bwd 8,7 --rounds 9 --shapes 4x4096x12x64,1x8192x12x64,4x512x12x64 --out $R/r1 > $R/r1.log 2>&1; log "r1 rc $?"
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $N --fwd "" --bwd 7,8 --rounds 9 --shapes 4x4096x12x64,1x8192x12x64,4x512x12x64 --out $R/r2 > $R/r2.log 2>&1; log "r2 rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -v "fwd " $R/r1.log | tail -16; grep -v "fwd " $R/r2.log | tail -16
cat $R/progress.log
