#!/bin/bash
# v29 call1 (prepared in the 29th session, which had no device; v28's call6 with the [dw_adamw] tests, steps with
# microbatch 2, two other shared-memory splits, the epilogue's loop unrolled and a memcheck added): the two epilogues
# side by side, v28b (libdwa_regs.so: the chunks a loop, each thread's accumulators straight from registers) and v28c
# (libdwa.so: the accumulators through the slot's g box, a float4 runtime loop; with grad_in, summed into grad_in's
# box in place). Checks (the hang-checked library first), xl and small timing, the [dw_adamw] tests, xl / small steps
# in_gemm off / on (v28c), then while time is left xl at microbatch 2, memcheck at the small shapes and an ncu stall
# summary of one W13 call. Carry .dev:
#   OBJ=/tmp/dwa-obj bash launch/dw_adamw_bench/build.sh && tar cJf .dev/dwa.tar.xz -C .carry dwa
#   xz -T4 -c build-cuda/trainer > .dev/trainer.xz; xz -T4 -c build-cuda/tests/unit_tests > .dev/unit_tests.xz
#   cp this file .dev/call1.sh; run: bash .dev/call1.sh
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins trainer unit_tests
C=launch/dw_adamw_bench/check.py
step quick 60 python3 $C --lib dwa/libdwa_debug.so --quick --no-time --out $R/quick ||
  { tail -20 $R/quick.log; exit 1; }
step check 120 python3 $C --lib dwa/libdwa.so --no-time --out $R/check || { tail -20 $R/check.log; exit 1; }
step check_regs 60 python3 $C --lib dwa/libdwa_regs.so --quick --no-time --out $R/check_regs
step time 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --out $R/time
step time_regs 100 python3 $C --lib dwa/libdwa_regs.so --no-check --rounds 7 --variants fused,today --out $R/time_regs
# shared memory split otherwise: 7 operand stages for the product alone (libdwa_s7: is its 0.70 ms against
# cuBLASLt's 0.58 a pipeline too shallow at 4 stages?), 2 epilogue slots and 5 stages for the fused kernel (s5r2)
step check_s7 60 python3 $C --lib dwa/libdwa_s7.so --quick --no-time --out $R/check_s7
step check_s5r2 60 python3 $C --lib dwa/libdwa_s5r2.so --quick --no-time --out $R/check_s5r2
step time_s7 100 python3 $C --lib dwa/libdwa_s7.so --no-check --rounds 7 --variants gemm_ours,gemm_cublaslt \
  --out $R/time_s7
step time_s5r2 100 python3 $C --lib dwa/libdwa_s5r2.so --no-check --rounds 7 --variants fused,fused_grad_in,today \
  --out $R/time_s5r2
# the staged epilogue's float4 loop unrolled 2 and 4 times (one epilogue warp a scheduler: latency-bound?)
for u in u2 u4; do
  step check_$u 60 python3 $C --lib dwa/libdwa_$u.so --quick --no-time --out $R/check_$u
  step time_$u 100 python3 $C --lib dwa/libdwa_$u.so --no-check --rounds 7 --variants fused,fused_grad_in,today \
    --out $R/time_$u
done
step tests 120 .dev/bin/unit_tests "[dw_adamw],[checkpointing]"
xl() { local n=$1; shift
  step $n 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=$n \
    --set output.results=$R/$n.json --set bench.warmup_steps=3 --set bench.measure_steps=10 "$@"; }
for g in false true; do xl xl_g$g --set optimizer.in_gemm=$g; done
for g in false true; do
  step small_g$g 60 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set name=small_$g \
    --set optimizer.in_gemm=$g --set output.results=$R/small_g$g.json
done
if [ $(left 590) -gt 90 ]; then
  for g in false true; do xl xl_mb2_g$g --set data.microbatch_size=2 --set optimizer.in_gemm=$g; done
fi
if [ $(left 590) -gt 130 ]; then
  step memcheck 120 compute-sanitizer --tool memcheck python3 $C --lib dwa/libdwa.so --quick --no-time --out $R/mc
fi
if [ $(left 590) -gt 100 ]; then
  step ncu 90 ncu --set full --import-source yes --kernel-name regex:dw_adamw_kernel --launch-skip 2 \
    --launch-count 1 -o $R/fused python3 $C --lib dwa/libdwa.so --no-check --rounds 1 --shapes xl --weights W13 \
    --variants fused --out $R/n
  ncu -i $R/fused.ncu-rep --page details > $R/details.log 2>&1
  ncu -i $R/fused.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/source.csv.gz
  rm -f $R/fused.ncu-rep; save
fi
grep -E "failures" $R/quick.log $R/check*.log
for t in time time_regs time_s7 time_s5r2 time_u2 time_u4; do echo "== $t"; tail -13 $R/$t.log; done
tail -3 $R/tests.log
grep -E "ERROR SUMMARY" $R/memcheck.log 2>/dev/null
grep -E "Duration|DRAM Throughput|No Eligible|Warp Cycles Per Issued" $R/details.log 2>/dev/null
for f in $R/xl_g*.json $R/small_g*.json $R/xl_mb2_g*.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], \
r['status'], r['timing']['step']['median_ms'], round(r['memory']['peak_bytes']/2**30, 2), r['loss']['per_step'][-1])" $f
done
cat $R/progress.log
