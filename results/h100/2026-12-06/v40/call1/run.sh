#!/bin/bash
# v40's first call: name the card; on an H200 run issue 19's prepared H200 call (v36/prepared/call_h200.sh), on an
# H100: the forward with part of its exponentials on the FMA pipe (exp2_poly; variants 40-42 of d 64's 9, 43-44 of
# d 128's 18): float64 checks, then rounds beside production and SDPA; the attention sequence probe (v39/prepared/call_seq.sh), the SASS count of the Hopper forwards (HGMMA and
# warpgroup waits per kernel, for the skip variants 9 / 18 against 6 / 16) and ncu of the d 64 production forward
# and backward (16 heads, T 16384, causal): the pipes' use (tensor, xu = MUFU, fma, alu) and issue slots, whether
# the d 64 forward is held by its exponentials. Carry .dev: trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash results/h200/2026-12-06/v36/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
cp results/h100/2026-12-06/v39/prepared/seqprobe.py $R/
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
L=flash/libflashbench.so
step check 200 python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd 9,40,41,42,18,43,44 --bwd '' \
  --no-time --out $R/check
step rounds 300 python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd 9,40,41,42,18,43,44 --bwd '' \
  --rounds 31 --out $R/rounds
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 > $R/smi.log 2>&1 &
pid=$!
step seq 150 python3 results/h100/2026-12-06/v39/prepared/seqprobe.py flash/libflashbench.so
kill $pid
# per kernel: its name, then the counts of HGMMA, WARPGROUP.ARRIVE, WARPGROUP.DEPBAR and WARPSYNC lines
step sass 120 bash -c "cuobjdump -sass flash/libflashbench.so | awk '/Function :/ {if (n) print n, h, a, w, s; n=\$3; h=a=w=s=0} /HGMMA/ {h++} /WARPGROUP.ARRIVE/ {a++} /WARPGROUP.DEPBAR/ {w++} /WARPSYNC/ {s++} END {print n, h, a, w, s}' > $R/sass_counts.txt; wc -l $R/sass_counts.txt"
M=sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__cycles_active.avg
C="python3 launch/flash_bench/sm90_check.py --lib flash/libflashbench.so --prod flash/libflashbench.so --profile --profile-d 64"
step ncu_fwd64 120 ncu --clock-control none --kernel-name regex:flash_fwd_sm90 --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --metrics $M $C --fwd 9 --bwd ""
step ncu_bwd64 120 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight \
  --section ComputeWorkloadAnalysis --section WarpStateStats --metrics $M $C --fwd 9 --bwd 7
{ cat $R/gpu.log; grep -E "checks|fail|FAIL|bit for bit|worst" $R/check.log | head -20; tail -30 $R/rounds.log
  cat $R/seq.log; tail -1 $R/sass.log
  grep -hE "Duration|Issue Slots|highest-utilized|pipe_xu|pipe_fma|pipe_alu|issue_active|Warp Cycles Per Issued" \
    $R/ncu_fwd64.log $R/ncu_bwd64.log | cut -c1-150; } > $R/summary.log 2>&1
finish
