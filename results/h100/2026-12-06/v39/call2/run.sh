#!/bin/bash
# v39: the Hopper forward with O's rescale skipped where a warp's running maxima did not move (kSkipUnitRescale:
# a multiply by exactly 1 left out, so the same bits). Variants 9 / 18 / 27 / 36 (d 64 / 128 / 80 / 96) against
# production's 6 / 16 / 24 / 34 in one library: float64 checks and bit for bit (checks), then rounds beside each
# other and SDPA (16 heads T 16384, xl's 4 x 32 x 80, small's 4 x 12 x 64). Carry .dev/flash.tar.xz
# (launch/flash_bench/build.sh, then tar cJf .dev/flash.tar.xz -C .carry flash).
source launch/device_call.sh "$0"
unpack_tar .dev/flash.tar.xz
C=flash/libflashbench.so
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step check 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 6,9,16,18,24,27,34,36 --bwd '' \
  --no-time --out $R/check
step rounds 300 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 16,18,6,9,24,27 --bwd '' \
  --rounds ${ROUNDS:-11} --xl --shapes 4x512x12x64 --out $R/rounds
{
cat $R/gpu.log
grep -E "checks|fail|FAIL|bit for bit|worst" $R/check.log | head -20
tail -30 $R/rounds.log
} > $R/summary.log 2>&1
finish
