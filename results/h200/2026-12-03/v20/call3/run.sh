#!/bin/bash
# v20 call3: ncu of the d 64 backward, production configuration (0) and 128-query tiles (7), 16 x 64, T 16384, causal
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash.tar.xz
cp .dev/call3.sh $R/run.sh
for v in 7 0; do
  timeout 120 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_long_scoreboard python3 launch/flash_bench/sm90_check.py --profile --fwd "" --bwd $v > $R/ncu_v$v.txt 2>&1
done
tar czf $OUT/r.tgz -C $OUT r
for v in 7 0; do echo "== v$v"; grep -E "Duration|Shared|gmma|bank|Stall|Issue Slots|Throughput|Pipe|Warp Cycles" $R/ncu_v$v.txt | head -24; done
