#!/bin/bash
# The 33rd session's kernel experiment, DWA_WIDE_CHUNK (kernels/dw_adamw/dw_adamw_sm90.cu: epilogue chunks of 16 rows
# x 128 columns, 512 contiguous bytes a row of p, m, v and p_work, against 64 x 32 and 128 bytes). The split ring
# (v33 call_split: two epilogues at once) did not raise the epilogue's rate, so the next question is whether DRAM's
# row locality does. Checks (hang check first), a bitwise comparison with production (p, m, v, p_work; the sum of g^2
# is summed in another order), then times beside production in the same call: K 2048 (xl's tokens) and K 64 (the
# epilogue nearly alone; the split build too when present). Any sm_90 GPU; ~3 minutes.
# Carry .dev/dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C .carry dwa).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
step check_wide_debug 150 python3 $C --lib dwa/libdwa_wide_debug.so --quick --no-time --out $R/check_wide_debug
step check_wide_full 150 python3 $C --lib dwa/libdwa_wide.so --no-time --out $R/check_wide_full
step same 150 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_wide.so --same-order-free --no-check --no-time --out $R/same
step time_prod 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --out $R/time_prod
step time_wide 100 python3 $C --lib dwa/libdwa_wide.so --no-check --rounds 7 --out $R/time_wide
step time_prod_k64 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --k 64 --variants fused,today --out $R/time_prod_k64
step time_wide_k64 100 python3 $C --lib dwa/libdwa_wide.so --no-check --rounds 7 --k 64 --variants fused,today --out $R/time_wide_k64
if [ -f dwa/libdwa_split.so ]; then
  step time_split_k64 100 python3 $C --lib dwa/libdwa_split.so --no-check --rounds 7 --k 64 --variants fused,today --out $R/time_split_k64
fi
step time_wide2 100 python3 $C --lib dwa/libdwa_wide.so --no-check --rounds 7 --shapes xl --out $R/time_wide2
step time_prod2 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --shapes xl --out $R/time_prod2
{
grep -hE "failures|stuck" $R/check_wide*.log
grep -hE "same as|failures" $R/same.log
for n in time_prod time_wide time_prod2 time_wide2 time_prod_k64 time_wide_k64 time_split_k64; do
  [ -f $R/$n.log ] && { echo "$n:"; grep -E "block|W13" $R/$n.log | tail -4; }
done
} > $R/summary.log 2>&1
save
cat $R/summary.log
cat $R/progress.log
