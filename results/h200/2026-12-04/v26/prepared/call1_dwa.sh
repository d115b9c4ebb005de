#!/bin/bash
# v26 call1 (prepared in the 26th session, which had no device): the first GPU run of the fused weight gradient +
# AdamW kernel (kernels/dw_adamw/). Carry .dev with dwa.tar.xz:
#   OBJ=/tmp/dwa-obj bash launch/dw_adamw_bench/build.sh && tar cJf .dev/dwa.tar.xz -C .carry dwa
# Order: the float64 checks at the small shapes first under a time limit (a protocol bug hangs: the limit ends it),
# then every check, the timing beside today's path (autotuned cuBLASLt dW + kernels::adamw) at the xl and small
# blocks' weights, compute-sanitizer (memcheck, racecheck, synccheck) at the small shapes, and ncu of one xl block
# (time and DRAM bytes of each kernel).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
L=dwa/libdwa.so
C=launch/dw_adamw_bench/check.py
step quick 60 python3 $C --lib $L --quick --no-time --out $R/quick
step check 150 python3 $C --lib $L --no-time --out $R/check
step time 120 python3 $C --lib $L --no-check --rounds 11 --out $R/time
step memcheck 120 compute-sanitizer --tool memcheck python3 $C --lib $L --quick --no-time --out $R/mc
step synccheck 120 compute-sanitizer --tool synccheck python3 $C --lib $L --quick --no-time --out $R/sc
if [ $(left 560) -gt 120 ]; then
  step racecheck $(($(left 560) - 60)) compute-sanitizer --tool racecheck python3 $C --lib $L --quick --no-time --out $R/rc
fi
if [ $(left 560) -gt 40 ]; then
  step ncu $(($(left 560) - 10)) ncu --kernel-name regex:"dw_adamw|adamw|Kernel|gemm|sm90" --launch-skip 20 \
    --launch-count 25 --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
    python3 $C --lib $L --no-check --rounds 1 --shapes xl --out $R/ncu
fi
grep -E "^check|failures" $R/quick.log $R/check.log | tail -14
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/memcheck.log $R/synccheck.log $R/racecheck.log 2>/dev/null
tail -12 $R/time.log
cat $R/progress.log
