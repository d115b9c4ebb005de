#!/bin/bash
# v21 call1: dQ tile swizzle chunk ^ 2 (t % 4) (new) against chunk ^ t % 8 (old): checks of the new library, then
# timing with each library as --lib (variants) and the other as --prod (production), in turn; racecheck of new smoke
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash_new.tar.xz && tar xJf .dev/flash_old.tar.xz
ls -la .dev/flash_new .dev/flash_old > $R/ls.txt
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt
N=.dev/flash_new/libflashbench.so; O=.dev/flash_old/libflashbench.so
timeout 200 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd "" --bwd 7,10,20,31 --no-time --out $R/check > $R/check.log 2>&1; echo "rc $?" >> $R/check.log
mkdir -p $R/t1 $R/t2 $R/t3
S=4x512x12x64,4x4096x12x64,1x8192x12x64
timeout 120 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd "" --bwd 7,10,31 --no-check --shapes $S --out $R/t1 > $R/t1.log 2>&1; echo "rc $?" >> $R/t1.log
timeout 120 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd "" --bwd 7,10,31 --no-check --shapes $S --out $R/t2 > $R/t2.log 2>&1; echo "rc $?" >> $R/t2.log
timeout 120 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd "" --bwd 7,10,31 --no-check --shapes $S --out $R/t3 > $R/t3.log 2>&1; echo "rc $?" >> $R/t3.log
cd .dev/flash_new && timeout 100 compute-sanitizer --tool racecheck ./smoke > $R/racecheck.log 2>&1; echo "rc $?" >> $R/racecheck.log
timeout 60 compute-sanitizer --tool memcheck ./smoke > $R/memcheck.log 2>&1; echo "rc $?" >> $R/memcheck.log
cd - > /dev/null
cp .dev/call1.sh $R/run.sh
tar czf $OUT/r.tgz -C $OUT r
tail -3 $R/check.log; for f in t1 t2 t3; do echo "== $f"; tail -22 $R/$f.log; done; tail -3 $R/racecheck.log $R/memcheck.log
