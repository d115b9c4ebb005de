#!/bin/bash
# v26 call1 (prepared in the 26th session, which had no device): the first GPU run of the fused weight gradient +
# AdamW kernel (kernels/dw_adamw/) and of optimizer.in_gemm. Carry .dev with dwa.tar.xz, trainer.xz, unit_tests.xz:
#   OBJ=/tmp/dwa-obj bash launch/dw_adamw_bench/build.sh && tar cJf .dev/dwa.tar.xz -C .carry dwa
#   xz -T2 -c build-cuda/trainer > .dev/trainer.xz; xz -T2 -c build-cuda/tests/unit_tests > .dev/unit_tests.xz
# Order: the float64 checks at the small shapes first under a time limit (a protocol bug hangs: the limit ends it),
# then every check, the timing beside today's path (autotuned cuBLASLt dW + kernels::adamw) at the xl and small
# blocks' weights, the [dw_adamw] tests, then xl and small steps with in_gemm off / on / off / on (CUDA graphs on,
# as the defaults), and (27th session: in_gemm with microbatches) xl at microbatch 2 off / on, a table last.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins trainer unit_tests
L=dwa/libdwa.so
C=launch/dw_adamw_bench/check.py
# the debug library first: a stuck mbarrier wait prints its block, thread, barrier and parity and traps
step quick 60 python3 $C --lib dwa/libdwa_debug.so --quick --no-time --out $R/quick
step check 150 python3 $C --lib $L --no-time --out $R/check
step time 120 python3 $C --lib $L --no-check --rounds 11 --out $R/time
step tests 120 .dev/bin/unit_tests "[dw_adamw],[checkpointing]"
for rep in 1 2; do
  for g in false true; do
    step xl_g${g}_$rep 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_$g \
      --set optimizer.in_gemm=$g --set output.results=$R/xl_g${g}_$rep.json --set bench.warmup_steps=3 \
      --set bench.measure_steps=10
  done
done
for g in false true; do
  step small_g$g 60 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set name=small_$g \
    --set optimizer.in_gemm=$g --set output.results=$R/small_g$g.json
done
if [ $(left 600) -gt 120 ]; then
  for g in false true; do
    step xl_mb2_g${g} 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 \
      --set name=xl_mb2_$g --set data.microbatch_size=2 --set optimizer.in_gemm=$g \
      --set output.results=$R/xl_mb2_g${g}.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  done
fi
grep -E "^check|failures" $R/quick.log $R/check.log | tail -14
tail -12 $R/time.log; tail -3 $R/tests.log
for f in $R/xl_g*.json $R/xl_mb2_g*.json $R/small_g*.json; do
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], r['status'], \
r['timing']['step']['median_ms'], round(r['memory']['peak_bytes']/2**30, 2), r['loss']['per_step'][-1])" $f
done
cat $R/progress.log
