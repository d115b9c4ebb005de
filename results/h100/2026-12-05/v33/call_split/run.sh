#!/bin/bash
# The 32nd session's kernel experiment, DWA_SPLIT_RING (kernels/dw_adamw/dw_adamw_sm90.cu: each consumer its own half
# of the epilogue ring and its own epilogue producer thread, so that the two epilogues stream at once), built but not
# yet run: its float64 checks first under the hang check (a protocol error then prints and traps instead of hanging),
# then without, then the library's times beside production's (libdwa.so) in the same call. Any GPU of sm_90 will do
# (the H100's v32 production times: xl block 1.4665 ms fused, 1.7323 today). ~5 minutes.
# Carry .dev/dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C .carry dwa).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
step check_split_debug 150 python3 $C --lib dwa/libdwa_split_debug.so --quick --no-time --out $R/check_split_debug
step check_split 120 python3 $C --lib dwa/libdwa_split.so --quick --no-time --out $R/check_split
# every checked shape once (the quick set has 1 and 3 tiles a CTA; the full set more)
step check_split_full 150 python3 $C --lib dwa/libdwa_split.so --no-time --out $R/check_split_full
# the split build must give production's numbers bit for bit (each thread's tiles and arithmetic are unchanged)
step same 150 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_split.so --no-check --no-time --out $R/same
step time_prod 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --out $R/time_prod
step time_split 100 python3 $C --lib dwa/libdwa_split.so --no-check --rounds 7 --out $R/time_split
{
grep -hE "failures|stuck" $R/check_split*.log
grep -hE "same as|failures" $R/same.log
echo "production:"; tail -3 $R/time_prod.log
echo "split:"; tail -3 $R/time_split.log
} > $R/summary.log 2>&1
save
cat $R/summary.log
cat $R/progress.log
