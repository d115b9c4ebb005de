#!/bin/bash
# v20 call1: 128-query tiles for the d 64 Hopper backward (variants 6, 7) beside production (0) and SDPA
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt
timeout 420 python3 launch/flash_bench/sm90_check.py --fwd 0 --bwd 0,6,7 --shapes 4x512x12x64,4x2048x12x64,4x512x20x64 --out $R > $R/check.log 2>&1
echo "rc $?" >> $R/check.log
cp .dev/call1.sh $R/run.sh
tar czf $OUT/r.tgz -C $OUT r
tail -45 $R/check.log
