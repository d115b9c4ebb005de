#!/bin/bash
# v40: bench.py --short with the forward + backward rows rested (rested_ms: ours and SDPA's each after 300 ms idle).
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
L=flash/libflashbench.so
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log
step short 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short
step short2 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short2
{ cat $R/gpu.log; tail -4 $R/short.log; tail -4 $R/short2.log; } > $R/summary.log
finish
