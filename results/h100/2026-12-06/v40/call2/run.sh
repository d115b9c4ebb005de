#!/bin/bash
# v40 call 2, as it ran (an inline command of the run tool; its record's run.sh was a copy of prepared/probe.sh,
# which the command named when it sourced launch/device_call.sh): bench.py --short twice, the old f+b protocol.
source launch/device_call.sh results/h100/2026-12-06/v40/prepared/probe.sh; unpack_tar .dev/flash.tar.xz; L=flash/libflashbench.so; step short 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short; step short2 120 python3 launch/flash_bench/bench.py --lib $L --short --no-check --out $R/short2; { tail -4 $R/short.log; tail -4 $R/short2.log; } > $R/summary.log; finish
