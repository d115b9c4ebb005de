#!/bin/bash
# v28 call6: two epilogues side by side: v28b (libdwa_regs.so: the chunks a loop, each thread's accumulators
# straight from registers) and v28c (libdwa.so: the accumulators through the slot's g box, a float4 runtime loop).
# Checks, xl and small timing, xl steps in_gemm off / on (v28c), ncu stall summary of one W13 call of v28c.
# Prepared in the 28th session (its device time ran out before it ran). Carry .dev with dwa.tar.xz and trainer.xz:
#   OBJ=/tmp/dwa-obj bash launch/dw_adamw_bench/build.sh && tar cJf .dev/dwa.tar.xz -C .carry dwa
#   xz -T2 -c build-cuda/trainer > .dev/trainer.xz; cp this file .dev/call6.sh; run: bash .dev/call6.sh
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins trainer
C=launch/dw_adamw_bench/check.py
step quick 60 python3 $C --lib dwa/libdwa_debug.so --quick --no-time --out $R/quick || { tail -20 $R/quick.log; exit 1; }
step check 120 python3 $C --lib dwa/libdwa.so --no-time --out $R/check || { tail -20 $R/check.log; exit 1; }
step check_regs 60 python3 $C --lib dwa/libdwa_regs.so --quick --no-time --out $R/check_regs
step time 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --out $R/time
step time_regs 100 python3 $C --lib dwa/libdwa_regs.so --no-check --rounds 7 --shapes xl --variants fused,today --out $R/time_regs
for g in false true; do
  step xl_g$g 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_$g \
    --set optimizer.in_gemm=$g --set output.results=$R/xl_g$g.json --set bench.warmup_steps=3 \
    --set bench.measure_steps=10
done
step ncu 120 ncu --set full --import-source yes --kernel-name regex:dw_adamw_kernel --launch-skip 2 --launch-count 1 \
  -o $R/fused python3 $C --lib dwa/libdwa.so --no-check --rounds 1 --shapes xl --weights W13 --variants fused --out $R/n
step details 60 ncu -i $R/fused.ncu-rep --page details
step source 60 bash -c "ncu -i $R/fused.ncu-rep --page source --csv --print-source sass | gzip > $R/source.csv.gz"
rm -f $R/fused.ncu-rep; save
grep -E "failures" $R/quick.log $R/check.log $R/check_regs.log
tail -13 $R/time.log; tail -7 $R/time_regs.log
grep -E "Duration|DRAM Throughput|No Eligible|Warp Cycles Per Issued" $R/details.log
for f in $R/xl_g*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], r['status'], \
r['timing']['step']['median_ms'], round(r['memory']['peak_bytes']/2**30, 2), r['loss']['per_step'][-1])" $f
done
cat $R/progress.log
