#!/bin/bash
# v40: ours against SDPA's d 64 / 128 forward + backward sustained, rested and paired (.dev/fairprobe.py), the SM
# clock and power sampled.
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
cp .dev/fairprobe.py $R/
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > $R/smi.log 2>&1 &
pid=$!
step fair 150 python3 .dev/fairprobe.py flash/libflashbench.so
kill $pid
{ cat $R/gpu.log; cat $R/fair.log; } > $R/summary.log
finish
