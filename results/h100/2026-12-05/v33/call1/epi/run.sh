#!/bin/bash
# The 33rd session's epilogue experiments (kernels/dw_adamw/dw_adamw_sm90.cu), each a bench library beside production
# (libdwa.so) in one call: wide (DWA_WIDE_CHUNK: chunks of 16 rows x 128 columns, 512 contiguous bytes a row of each
# array against 128: DRAM row locality), tma (DWA_TMA_STORE: p, m, v, p_work written back into the slot and stored by
# the TMA, one thread, instead of each thread's st.global), widetma (both). The split ring (v33 call_split: two
# epilogues at once) did not raise the epilogue's rate. Per variant: the float64 checks with the hang check (quick
# set), then the full set, a bitwise comparison with production (p, m, v, p_work; the sum of g^2 left out: wide sums
# in another order), then times at K 2048 (xl's tokens) and K 64 (the epilogue nearly alone), production's in the
# same rounds. Any sm_90 GPU; ~4 minutes.
# Carry .dev/dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C .carry dwa).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
V="wide tma widetma"
for v in $V; do
  step check_${v}_debug 100 python3 $C --lib dwa/libdwa_${v}_debug.so --quick --no-time --out $R/check_${v}_debug
done
for v in $V; do
  step check_${v} 120 python3 $C --lib dwa/libdwa_${v}.so --no-time --out $R/check_${v}
  step same_${v} 100 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_${v}.so --same-order-free --no-check --no-time --out $R/same_${v}
done
for v in prod $V prod2; do
  lib=dwa/libdwa_${v}.so; [ ${v#prod} != $v ] && lib=dwa/libdwa.so
  step time_${v} 100 python3 $C --lib $lib --no-check --rounds 7 --out $R/time_${v}
  step time_${v}_k64 100 python3 $C --lib $lib --no-check --rounds 7 --k 64 --variants fused,today --shapes xl --out $R/time_${v}_k64
done
{
for v in $V; do echo "$v: $(grep -h "failures\|stuck" $R/check_${v}_debug.log $R/check_${v}.log | tr '\n' ' ') same: $(grep -c ": equal" $R/same_${v}.log) equal, $(grep -c DIFFER $R/same_${v}.log) differ"; done
for v in prod $V prod2; do
  echo "$v:"; grep -E "block|W13" $R/time_${v}.log | tail -4; grep -E " block " $R/time_${v}_k64.log | tail -1
done
} > $R/summary.log 2>&1
save
cat $R/summary.log
cat $R/progress.log
