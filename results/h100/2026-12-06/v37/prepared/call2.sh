#!/bin/bash
# v37 call 2: why DWA_EPI_WG (call 1: correct, bits equal production's) is slower than production (xl block 1.596
# against 1.422 ms, H100). Diagnostic bench builds, timing only: dwa_ew_noupd (the epilogue warpgroup skips its
# elements: the cooperative 128 x 128 products and the hand-off alone), dwa_ew_nomma (the consumers skip their
# products: the epilogue alone beside the operand loads), dwa_ew_s2r4 (2 operand stages, 4 ring slots: more of the
# epilogue's loads in flight); each beside production and epiwg, twice, alternating. Then ncu (full set, SASS source)
# of W13's fused update, production against epiwg. Carry .dev: dwa.tar.xz (with the diagnostic libraries).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
step check_s2r4 60 $C --lib dwa/libdwa_ew_s2r4.so --quick --no-time --same-as dwa/libdwa.so --same-order-free \
  --out $R/check_s2r4
T="--no-check --variants fused --rounds 11"
for r in 1 2; do
  for v in dwa dwa_epiwg dwa_ew_noupd dwa_ew_nomma dwa_ew_s2r4; do
    step t${r}_$v 60 $C --lib dwa/lib$v.so $T --out $R/t${r}_$v
  done
done
for v in dwa dwa_epiwg; do
  step ncu_$v 120 ncu --set full --import-source yes --kernel-name regex:"dw_adamw" \
    --launch-skip 2 --launch-count 1 -o $R/$v $C --lib dwa/lib$v.so --no-check --rounds 1 --shapes xl \
    --weights W13 --variants fused --out $R/n_$v
  ncu -i $R/$v.ncu-rep --page details > $R/details_$v.log 2>&1
  ncu -i $R/$v.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/source_$v.csv.gz
  rm -f $R/$v.ncu-rep; save
done
{
cat $R/gpu.log
grep -E "same as|failures" $R/check_s2r4.log | head -4
for f in $R/t*_*.log; do echo "$(basename $f): $(grep -E '^xl +(W13|block)' $f | tr -s ' ' | tr '\n' ' ')"; done
for v in dwa dwa_epiwg; do echo "ncu $v:"; grep -E "^ +(Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Hit|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Shared Memory|Bank)" $R/details_$v.log | head -16; done
} > $R/summary.log 2>&1
finish
