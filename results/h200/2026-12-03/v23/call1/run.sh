#!/bin/bash
# v23 call1: the d 128 backward's dQ-tile stores as st.shared.v2 with compile-time warpgroup offsets (patch of v22
# call8) against production (HEAD 8d124cd): float64 checks of the new library's backward variants, rounds old vs new
# in both library orders, synccheck / racecheck / memcheck of the new smoke run.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_old.tar.xz && tar xJf .dev/flash_new.tar.xz
cp .dev/call1.sh $R/run.sh
O=.dev/flash_old/libflashbench.so; N=.dev/flash_new/libflashbench.so
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd 6,16,24,34 --bwd 7,10,20,31 --no-time --out $R/check_new > $R/check_new.log 2>&1; log "check new rc $?"
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $O --prod $O --fwd 16 --bwd 10 --no-time --out $R/check_old > $R/check_old.log 2>&1; log "check old rc $?"
timeout 150 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd '' --bwd 7,10,31 --rounds 21 --shapes 4x4096x16x128,2x8192x16x128,4x2048x32x128,1x16384x16x96 --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
timeout 150 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd '' --bwd 7,10,31 --rounds 21 --shapes 4x4096x16x128,2x8192x16x128,4x2048x32x128,1x16384x16x96 --out $R/rounds_b > $R/rounds_b.log 2>&1; log "rounds b rc $?"
for t in synccheck racecheck memcheck; do timeout 120 compute-sanitizer --tool $t .dev/flash_new/smoke > $R/$t.log 2>&1; log "$t rc $?"; done
timeout 150 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --profile --profile-d 128 --fwd "" --bwd 10 > $R/ncu_bwd_d128_new.txt 2>&1; log "ncu bwd rc $?"
timeout 150 ncu --clock-control none --kernel-name regex:flash_fwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --profile --profile-d 128 --fwd 16 --bwd "" > $R/ncu_fwd_d128.txt 2>&1; log "ncu fwd rc $?"
timeout 200 ncu --clock-control none --kernel-name regex:flash_fwd_sm90 --launch-count 1 --section SourceCounters --page source --print-source sass --csv python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --profile --profile-d 128 --fwd 16 --bwd "" > $R/ncu_src_fwd_d128.csv 2> $R/ncu_src_fwd_d128.err; log "ncu fwd src rc $?"
gzip -9 $R/ncu_src_fwd_d128.csv
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL|differ|bit for bit" $R/check_new.log | head -20
grep -E "checks:|FAIL" $R/check_old.log | head -5
for t in synccheck racecheck memcheck; do tail -1 $R/$t.log; done
echo "== a: variants = new, prod = old"; grep -E " bwd " $R/rounds_a.log
echo "== b: variants = old, prod = new"; grep -E " bwd " $R/rounds_b.log
grep -E "Duration|Bank|Excessive" $R/ncu_bwd_d128_new.txt | head
grep -E "Duration|Throughput|Warp Cycles|Issue|Eligible|Registers" $R/ncu_fwd_d128.txt | head -20
cat $R/progress.log
