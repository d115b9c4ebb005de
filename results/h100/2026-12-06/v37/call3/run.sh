#!/bin/bash
# v37 call 3: the epilogue alone (K 64: one operand stage a tile, so next to no operand traffic), production against
# DWA_EPI_WG's fourth warpgroup (epiwg, and nomma: no products), twice, alternating; then K 2048 once more for
# production and epiwg (the same call's baseline). Carry .dev: dwa.tar.xz (call 2's libraries).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
T="--no-check --variants fused --rounds 11 --shapes xl"
for r in 1 2; do
  for v in dwa dwa_epiwg dwa_ew_nomma; do
    step k64_${r}_$v 60 $C --lib dwa/lib$v.so $T --k 64 --out $R/k64_${r}_$v
  done
done
for v in dwa dwa_epiwg; do step k2048_$v 60 $C --lib dwa/lib$v.so $T --out $R/k2048_$v; done
{
cat $R/gpu.log
for f in $R/k*_*.log; do echo "$(basename $f): $(grep -E '^xl +(W13|block)' $f | tr -s ' ' | tr '\n' ' ')"; done
} > $R/summary.log 2>&1
finish
