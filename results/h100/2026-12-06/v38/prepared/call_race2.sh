#!/bin/bash
# v38 call 2: call 1 found where racecheck fails in the bench's checks: "an illegal memory access" at
# src/backend/cuda/matmul.cpp:119, the event sync of cuBLASLt's autotuning, i.e. in a cuBLASLt candidate that
# today's path (the yardstick) times before the fused kernel first runs; the timing mode never runs cuBLASLt. Here
# the quick checks under racecheck with today's path on cuBLASLt's first heuristic choice (check.py --unfused
# heuristic) and without it (--unfused off), the fused kernel filtered (kns=dw_adamw); then --unfused off with
# every kernel instrumented on the three smallest shapes. Carry .dev: dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py --lib dwa/libdwa.so --no-time"
RC="compute-sanitizer --tool racecheck --print-limit 20"
step race_heuristic 150 $RC --kernel-name kns=dw_adamw $C --quick --unfused heuristic --out $R/h
step race_off 150 $RC --kernel-name kns=dw_adamw $C --quick --unfused off --out $R/o
step race_all_off 150 $RC $C --check-shapes 0,1,2 --unfused off --out $R/a
step plain_autotune 60 $C --quick --out $R/p
{
cat $R/gpu.log
for n in race_heuristic race_off race_all_off plain_autotune; do
  echo "$n:"; grep -E "RACECHECK SUMMARY|Internal Sanitizer|fatal|^check M|dwa check" $R/$n.log | cut -c1-150 | head -10
done
} > $R/summary.log 2>&1
finish
