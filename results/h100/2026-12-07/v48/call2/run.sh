#!/bin/bash
# v48 call 2: the deterministic Hopper backward in the flash bench's library (production variant 1 of capi.cu):
# float64 checks with the workspace NaN-poisoned and bitwise twice (detprobe.py), then timed beside the default
# backward (variant 0) at the 16-head bar shapes and the models' shapes. Carry .dev: flash.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step probe 240 python3 results/h100/2026-12-07/v48/call2/detprobe.py flash/libflashbench.so
{
cat $R/gpu.log
grep -E "FAIL|checks:" $R/probe.log
sed -n '/^timings/,$p' $R/probe.log
} > $R/summary.log 2>&1
finish
