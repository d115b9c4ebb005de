#!/bin/bash
# v47's first call: on an H200, issue 19's rows (results/h200/2026-12-06/v40/prepared/call_h200.sh, LIMIT 420 s).
# On any other GPU, only the attention rows with bench.py's protocol of 298b492 (blocks timed behind a GPU sleep,
# never run on a GPU) and v40's sustained / rested probe. Carry .dev: trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${LIMIT:-420} exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step attention 90 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
step fair 60 python3 results/h100/2026-12-06/v40/call7/fairprobe.py flash/libflashbench.so
{
cat $R/gpu.log
echo "attention --short:"; tail -8 $R/attention.log; cat $R/fair.log
} > $R/summary.log 2>&1
finish
