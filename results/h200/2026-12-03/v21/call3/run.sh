#!/bin/bash
# v21 call3: persistent forward variants (6: d 64, 15: d 128, 24: d 80, 34: d 96; one CTA per SM, tiles in
# zigzag bands) and the d 64 backward with two dQ stages (8: no alignment slack), built from the working tree
# (flash_cur), checked in float64 and bit for bit against the production configurations (0, 10, 20, 32), timed
# beside call1's library as production (flash_new, 855f325); sustained forward rounds at d 64 / 80 / 128.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_new.tar.xz && tar xJf .dev/flash_cur.tar.xz
cp .dev/call3.sh $R/run.sh
C=.dev/flash_cur/libflashbench.so; N=.dev/flash_new/libflashbench.so
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 0,6,10,15,20,24,32,34 --bwd 7,8 --no-time --out $R/check > $R/check.log 2>&1; log "check rc $?"
timeout 150 python3 launch/flash_bench/sm90_check.py --lib $C --prod $N --fwd 0,6,10,15,20,24,32,34 --bwd 7,8 --no-check --xl --shapes 4x512x12x64,4x4096x12x64,4x512x16x128 --out $R/t1 > $R/t1.log 2>&1; log "t1 rc $?"
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 6,0,15,10,24,20 --rounds 9 --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $C --prod $N --fwd "" --bwd 8,7 --no-check --out $R/t2 > $R/t2.log 2>&1; log "t2 rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|worst|FAIL|differ" $R/check.log | head -20
grep -E "T16384|T512|T4096|T2048" $R/t1.log | grep -v "mma.sync"
tail -12 $R/rounds.log
grep -E "T16384" $R/t2.log | grep bwd
cat $R/progress.log
