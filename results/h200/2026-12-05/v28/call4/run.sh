#!/bin/bash
# v28 call4: where the fused kernel's epilogue spends its time: ncu --set full of one W13 call (stall reasons per
# SASS line), the details page and the source page.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
step ncu 200 ncu --set full --import-source yes --kernel-name regex:dw_adamw_kernel --launch-skip 2 --launch-count 1 \
  -o $R/fused python3 $C --lib dwa/libdwa.so --no-check --rounds 1 --shapes xl --weights W13 --variants fused --out $R/n
step details 60 ncu -i $R/fused.ncu-rep --page details
step source 60 bash -c "ncu -i $R/fused.ncu-rep --page source --csv --print-source sass | gzip > $R/source.csv.gz"
step raw 60 bash -c "ncu -i $R/fused.ncu-rep --page raw --csv | gzip > $R/raw.csv.gz"
grep -iE "Duration|Throughput|Stall|Warp Cycles|Issued|L2 Hit|DRAM" $R/details.log | head -60
ls -la $R
