#!/bin/bash
# v41's first call: name the card; on an H200 run issue 19's prepared H200 call (v40/prepared/call_h200.sh), on an
# H100: bench.py --short twice with the final rested form of the forward + backward rows (298b492: blocks of
# back-to-back calls behind a GPU sleep, in turn with SDPA's; not yet run on a GPU). Carry .dev: trainer.xz,
# flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
L=flash/libflashbench.so
step short 150 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short
step short2 150 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short2
{ cat $R/gpu.log; tail -8 $R/short.log; tail -8 $R/short2.log; } > $R/summary.log
finish
