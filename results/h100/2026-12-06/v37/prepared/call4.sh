#!/bin/bash
# v37 call 4: why racecheck of the fused kernel stops with "failed to handle a hardware exception" (v36 call2).
# Racecheck (the fused kernels only, --kernel-name) of the bench's quick checks through: DWA_EPI_WG's kernel (no
# setmaxnreg), production built with DWA_NO_SETMAXNREG (the same protocol without the register hand-over), and
# production as it is (v36's failure, again beside them). Carry .dev: dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
for v in dwa_epiwg dwa_nosetmaxnreg dwa; do
  step race_$v 150 compute-sanitizer --tool racecheck --kernel-name kns=dw_adamw --print-limit 20 \
    $C --lib dwa/lib$v.so --quick --no-time --out $R/race_$v
done
{
cat $R/gpu.log
for v in dwa_epiwg dwa_nosetmaxnreg dwa; do
  echo "racecheck $v:"; grep -E "RACECHECK SUMMARY|failures|Error|hazard" $R/race_$v.log | sort | uniq -c | head -8
done
} > $R/summary.log 2>&1
finish
