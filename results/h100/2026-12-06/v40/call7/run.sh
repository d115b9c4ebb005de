#!/bin/bash
# v40: call 4's and 5's probes again with SDPA's first calls (cuDNN's graph builds) before the timing.
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
cp .dev/fairprobe.py .dev/passprobe.py $R/
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > $R/smi.log 2>&1 &
pid=$!
step fair 150 python3 .dev/fairprobe.py flash/libflashbench.so
step pass 150 python3 .dev/passprobe.py flash/libflashbench.so
kill $pid
{ cat $R/gpu.log; cat $R/fair.log; cat $R/pass.log; } > $R/summary.log
finish
