#!/bin/bash
# v21 call5: the d 64 attention against SDPA in rounds (kernels in turn, 15 rounds after a warm-up: sustained
# clocks), the swizzle's before / after: flash_old (9a03c76, v20) and flash_new (855f325) each as production and as
# variants (7: production d 64 backward, 0: the 64-query backward of v19), two processes; then one burst-mode
# timing (the table) with flash_new.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_new.tar.xz && tar xJf .dev/flash_old.tar.xz
cp .dev/call5.sh $R/run.sh
O=.dev/flash_old/libflashbench.so; N=.dev/flash_new/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd 0 --bwd 7 --rounds 15 --out $R/r1 > $R/r1.log 2>&1; log "r1 rc $?"
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd 0 --bwd 7 --rounds 15 --out $R/r2 > $R/r2.log 2>&1; log "r2 rc $?"
timeout 150 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd 0,10 --bwd 7,10 --no-check --out $R/b1 > $R/b1.log 2>&1; log "b1 rc $?"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv >> $R/gpu.txt
tar czf $OUT/r.tgz -C $OUT r
grep "x64 " $R/r1.log; grep "x64 " $R/r2.log; grep -E "x64 |x128 " $R/b1.log
cat $R/progress.log
