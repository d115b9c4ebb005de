#!/bin/bash
# v20 call2: variants 7 (128-query tiles) and 8 (+ V in registers) checked and timed beside production (0) and SDPA; ncu of 0 / 7
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash.tar.xz
cp .dev/call2.sh $R/run.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt
timeout 240 python3 launch/flash_bench/sm90_check.py --fwd 0 --bwd 0,7,8 --shapes 4x512x12x64,4x2048x12x64 --out $R > $R/check.log 2>&1
echo "rc $?" >> $R/check.log
mkdir -p $R/t2 && timeout 120 python3 launch/flash_bench/sm90_check.py --no-check --fwd 0,10 --bwd 8,7,0 --out $R/t2 > $R/time2.log 2>&1
echo "rc $?" >> $R/time2.log
for v in 0 7 8; do
  timeout 100 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum python3 launch/flash_bench/sm90_check.py --profile --fwd "" --bwd $v > $R/ncu_v$v.txt 2>&1
done
tar czf $OUT/r.tgz -C $OUT r
grep -A8 "^shape" $R/check.log; grep "checks\|worst" $R/check.log; grep "bwd\|fwd" $R/time2.log | head -12
for v in 0 7 8; do echo "== v$v"; grep -E "Duration|Shared|gmma|bank|Stall|Issue Slots|Compute \(SM\) Th|Memory Th" $R/ncu_v$v.txt | head -14; done
