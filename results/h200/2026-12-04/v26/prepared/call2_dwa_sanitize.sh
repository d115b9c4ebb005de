#!/bin/bash
# v26 call2 (prepared): compute-sanitizer (memcheck, synccheck, racecheck) of the fused kernel at the small shapes,
# every [cuda] test, ncu of one xl block (each kernel's time and DRAM / L2 bytes). Carry as call1.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins unit_tests
L=dwa/libdwa.so
C=launch/dw_adamw_bench/check.py
step memcheck 120 compute-sanitizer --tool memcheck python3 $C --lib $L --quick --no-time --out $R/mc
step synccheck 120 compute-sanitizer --tool synccheck python3 $C --lib $L --quick --no-time --out $R/sc
step cuda_tests 120 .dev/bin/unit_tests "[cuda]"
step ncu 90 ncu --kernel-name regex:"dw_adamw|adamw|Kernel|gemm|sm90" --launch-skip 20 --launch-count 25 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \
  python3 $C --lib $L --no-check --rounds 1 --shapes xl --out $R/ncu
if [ $(left 560) -gt 60 ]; then
  step racecheck $(left 560) compute-sanitizer --tool racecheck python3 $C --lib $L --quick --no-time --out $R/rc
fi
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $R/memcheck.log $R/synccheck.log $R/racecheck.log 2>/dev/null
tail -3 $R/cuda_tests.log
cat $R/progress.log
