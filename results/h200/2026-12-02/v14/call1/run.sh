#!/bin/bash
# v14 call1: FlashAttention-3 intra-warpgroup overlap / ping-pong forward variants vs production (old lib as prod)
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT/r
tar xzf .dev/flash.tgz
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw --format=csv > $OUT/r/gpu.txt 2>&1
cd launch/flash_bench
timeout 300 python3 sm90_check.py --lib ../../.carry/flash/libflashbench.so --prod ../../.carry/flash_old/libflashbench.so \
  --fwd 10,12,13,0,3,4,5,20,22,23 --bwd "" --xl --out $OUT/r > $OUT/r/sm90_check.log 2>&1
echo "rc=$?" >> $OUT/r/sm90_check.log
# second timing pass (noise between passes)
timeout 150 python3 sm90_check.py --lib ../../.carry/flash/libflashbench.so --prod ../../.carry/flash_old/libflashbench.so \
  --fwd 13,10,12,4,0,23,20 --bwd "" --no-check --out $OUT/r/pass2 > $OUT/r/sm90_time2.log 2>&1
cd ../..
timeout 60 compute-sanitizer --tool racecheck .carry/flash/smoke > $OUT/r/racecheck_smoke.log 2>&1; echo "rc=$?" >> $OUT/r/racecheck_smoke.log
cd $OUT && tar czf r.tgz r
tail -45 $OUT/r/sm90_check.log; tail -30 $OUT/r/sm90_time2.log
