#!/bin/bash
# v23 call2: variant A of the d 128 backward's dQ stores (st.shared.v2 in store_dq_row only; call1's compile-time
# warpgroup branch dropped: +21% issued instructions, 5% slower) against production (HEAD 8d124cd): float64 checks,
# rounds old vs A in both library orders, ncu of A's d 128 backward, sanitizers of A's smoke run, every [cuda] unit
# test of a trainer build with A.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_old.tar.xz && tar xJf .dev/flash_a.tar.xz
cp .dev/call2.sh $R/run.sh
O=.dev/flash_old/libflashbench.so; N=.dev/flash_a/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
SH=4x4096x16x128,2x8192x16x128,4x2048x32x128,1x16384x16x96
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd '' --bwd 7,10,31 --rounds 21 --shapes $SH --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd '' --bwd 7,10,31 --rounds 21 --shapes $SH --out $R/rounds_b > $R/rounds_b.log 2>&1; log "rounds b rc $?"
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd '' --bwd 7,10,31 --rounds 21 --shapes $SH --out $R/rounds_c > $R/rounds_c.log 2>&1; log "rounds c rc $?"
timeout 100 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd 6,16,24,34 --bwd 7,10,20,31 --no-time --out $R/check_a > $R/check_a.log 2>&1; log "check a rc $?"
timeout 100 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --profile --profile-d 128 --fwd "" --bwd 10 > $R/ncu_bwd_d128_a.txt 2>&1; log "ncu bwd rc $?"
for t in synccheck racecheck memcheck; do timeout 100 compute-sanitizer --tool $t .dev/flash_a/smoke > $R/$t.log 2>&1; log "$t rc $?"; done
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL" $R/check_a.log | head -5
for t in synccheck racecheck memcheck; do tail -1 $R/$t.log; done
for x in a b c; do echo "== $x"; grep -E " bwd " $R/rounds_$x.log; done
grep -E "Duration|Bank|Warp Cycles Per Issued|SM Frequency" $R/ncu_bwd_d128_a.txt | head
cat $R/progress.log
