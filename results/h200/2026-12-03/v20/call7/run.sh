#!/bin/bash
# v20 call7: where the production d 64 backward (variant 7) stalls: ncu source page (SASS, warp-stall samples) of one
# launch, 16 x 64, T 16384, causal.
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash.tar.xz
cp .dev/call7.sh $R/run.sh
timeout 200 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SourceCounters --section WarpStateStats --page source --print-source sass --csv python3 launch/flash_bench/sm90_check.py --profile --fwd "" --bwd 7 > $R/ncu_src_v7.csv 2> $R/ncu_src_v7.err
echo "rc $?"
gzip -9 $R/ncu_src_v7.csv
tar czf $OUT/r.tgz -C $OUT r
ls -la $R; head -c 1500 $R/ncu_src_v7.err
