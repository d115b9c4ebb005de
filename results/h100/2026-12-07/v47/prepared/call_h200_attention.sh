#!/bin/bash
# v47, with little device time left: issue 19's two attention rows on an H200 only (bench.py --short behind a GPU
# sleep, then v40's sustained / rested probe); on any other GPU, nothing (the name of the card). Carry .dev:
# flash.tar.xz.
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  nvidia-smi --query-gpu=name --format=csv,noheader
  exit 0
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
