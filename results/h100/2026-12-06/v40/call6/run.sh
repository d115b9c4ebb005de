#!/bin/bash
# v40: SDPA's forward + backward under torch.profiler (GPU kernel time against wall time; its backend's kernels).
source launch/device_call.sh "$0"
cp .dev/sdpaprof.py $R/
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log
step prof 120 python3 .dev/sdpaprof.py
{ cat $R/gpu.log; grep -E "^d |Self CUDA time total|flash|cudnn|attention|Name|sdpa|fmha|void" $R/prof.log | cut -c1-200 | head -60; } > $R/summary.log
finish
