#!/bin/bash
# v39: the attention forward + backward in sequence against its passes apart (prepared/seqprobe.py), ours and SDPA's,
# with the SM clock and power sampled. Carry .dev/flash.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
cp results/h100/2026-12-06/v39/prepared/seqprobe.py $R/
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 50 > $R/smi.log 2>&1 &
pid=$!
step seq 120 python3 results/h100/2026-12-06/v39/prepared/seqprobe.py flash/libflashbench.so
kill $pid
{ cat $R/gpu.log; cat $R/seq.log; } > $R/summary.log 2>&1
finish
