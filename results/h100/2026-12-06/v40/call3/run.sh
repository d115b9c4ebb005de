#!/bin/bash
# v40: the d 64 / 128 forward + backward beside SDPA's in turn (bench.py --short's paired_ms; sm90_check --rounds
# with the production f+b row), after call 2's finding that bench.py's f+b ran right after its slowest variants.
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
L=flash/libflashbench.so
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log
step rounds 150 python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd 9 --bwd 7 --rounds 21 --out $R/rounds
step short 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short
step short2 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short2
{ cat $R/gpu.log; tail -14 $R/rounds.log; tail -4 $R/short.log; tail -4 $R/short2.log; } > $R/summary.log
finish
