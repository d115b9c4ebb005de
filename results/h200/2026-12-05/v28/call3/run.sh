#!/bin/bash
# v28 call3: the fused kernel with its epilogue operands staged by TMA into a shared ring (a second producer thread),
# the epilogues one after the other. Checks (debug library first: a stuck wait prints and traps), timing beside
# today's path, the [dw_adamw] and [checkpointing] tests, xl and small steps with in_gemm off / on.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins trainer unit_tests
L=dwa/libdwa.so
C=launch/dw_adamw_bench/check.py
step quick 60 python3 $C --lib dwa/libdwa_debug.so --quick --no-time --out $R/quick || { tail -20 $R/quick.log; exit 1; }
step check 120 python3 $C --lib $L --no-time --out $R/check || { tail -20 $R/check.log; exit 1; }
step time 120 python3 $C --lib $L --no-check --rounds 9 --out $R/time
step tests 120 .dev/bin/unit_tests "[dw_adamw],[checkpointing]"
for g in false true; do
  step xl_g$g 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_$g \
    --set optimizer.in_gemm=$g --set output.results=$R/xl_g$g.json --set bench.warmup_steps=3 \
    --set bench.measure_steps=10
done
for g in false true; do
  step small_g$g 60 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set name=small_$g \
    --set optimizer.in_gemm=$g --set output.results=$R/small_g$g.json
done
step xl_mb2_gtrue 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_mb2_true \
  --set data.microbatch_size=2 --set optimizer.in_gemm=true --set output.results=$R/xl_mb2_gtrue.json \
  --set bench.warmup_steps=3 --set bench.measure_steps=10
grep -E "^check|failures" $R/quick.log $R/check.log | tail -4
tail -13 $R/time.log; tail -3 $R/tests.log
for f in $R/xl_g*.json $R/xl_mb2_g*.json $R/small_g*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], r['status'], \
r['timing']['step']['median_ms'], round(r['memory']['peak_bytes']/2**30, 2), r['loss']['per_step'][-1])" $f
done
cat $R/progress.log
