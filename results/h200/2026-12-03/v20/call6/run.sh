#!/bin/bash
# v20 call6: the d 64 backward with the two consumers taking turns (ping-pong, variant 8) beside production (7):
# racecheck / memcheck of the smoke run (which calls 8 directly), float64 checks and timings in two processes.
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash.tar.xz
cp .dev/call6.sh $R/run.sh
timeout 60 compute-sanitizer --tool racecheck .carry/flash/smoke > $R/racecheck_smoke.log 2>&1; echo "racecheck rc $?" >> $R/racecheck_smoke.log
timeout 60 compute-sanitizer --tool synccheck .carry/flash/smoke > $R/synccheck_smoke.log 2>&1; echo "synccheck rc $?" >> $R/synccheck_smoke.log
timeout 150 python3 launch/flash_bench/sm90_check.py --fwd 0 --bwd 7,8 --shapes 4x512x12x64,4x4096x12x64 --out $R > $R/check.log 2>&1; echo "rc $?" >> $R/check.log
mkdir -p $R/t2 && timeout 100 python3 launch/flash_bench/sm90_check.py --no-check --fwd 0 --bwd 8,7 --shapes 4x4096x12x64 --out $R/t2 > $R/time2.log 2>&1; echo "rc $?" >> $R/time2.log
tar czf $OUT/r.tgz -C $OUT r
grep -h "SUMMARY\|smoke:\|rc " $R/racecheck_smoke.log $R/synccheck_smoke.log
grep "checks\|worst" $R/check.log; grep -E "1x16x64|4x4096|4x512" $R/check.log; echo ==; grep -E "1x16x64|4x4096" $R/time2.log
