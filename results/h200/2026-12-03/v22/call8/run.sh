#!/bin/bash
# v22 call8: ncu of the d 128 Hopper backward (production, variant 10; 16 heads, T 16384, causal): speed of light,
# warp states, memory workload (bank conflicts) and the source page, for the next session (bar 500 TFLOP/s).
set -u
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash_f.tar.xz
cp .dev/call8.sh $R/run.sh
C=.dev/flash_f/libflashbench.so
timeout 200 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section SourceCounters --page source --print-source sass --csv python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --profile --profile-d 128 --fwd "" --bwd 10 > $R/ncu_src_d128.csv 2> $R/ncu_src_d128.err; echo "ncu src rc $?"
timeout 150 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --profile --profile-d 128 --fwd "" --bwd 10 > $R/ncu_d128.txt 2>&1; echo "ncu rc $?"
gzip -9 $R/ncu_src_d128.csv
tar czf $OUT/r.tgz -C $OUT r
grep -E "Duration|Throughput|Bank|Warp Cycles|Stall|Issue|Eligible|Registers|Achieved" $R/ncu_d128.txt | head -40
