#!/bin/bash
# v37 call 5: racecheck of the fused kernel without --kernel-name (v35's racecheck without a filter ran the kernel on
# 5 shapes with no hazard in it and was stopped by time in cuBLASLt's kernels; with the filter, v36 and call 4 here,
# the tool fails at the first launch). The bench's timing mode with the fused variants only (no cuBLASLt): the
# update without and with grad_in and the product alone, the small block's four weights at K 128, one round.
# Carry .dev: dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
step race_small 240 compute-sanitizer --tool racecheck --print-limit 20 $C --lib dwa/libdwa.so --no-check \
  --variants fused,fused_grad_in,gemm_ours --rounds 1 --shapes small --k 128 --out $R/race_small
step race_filter_small 100 compute-sanitizer --tool racecheck --kernel-name kns=dw_adamw_kernel --print-limit 20 \
  $C --lib dwa/libdwa.so --no-check --variants fused,fused_grad_in,gemm_ours --rounds 1 --shapes small --k 128 \
  --out $R/race_filter_small
{
cat $R/gpu.log
for n in race_small race_filter_small; do
  echo "$n:"; grep -E "RACECHECK SUMMARY|Error|hazard|small +(Wqkv|Wo|W13|W2)" $R/$n.log | sort | uniq -c | head -12
done
} > $R/summary.log 2>&1
finish
