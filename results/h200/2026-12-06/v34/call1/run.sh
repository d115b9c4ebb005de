#!/bin/bash
# Session 34, call 1: v33's two prepared calls in one (results/h200/2026-12-05/v33/prepared/call_check.sh and
# call_pair.sh). (1) the fused kernel's [cuda] tests with the wide epilogue chunks (16 x 128), (2) the
# DWA_CLUSTER_PAIR bench: float64 checks under the hang check, then without, bitwise same-as production (order-free
# sum of g^2), times at K 2048 and K 64 beside production (production first and last), (3) the xl bf16 step (in_gemm
# auto) with the production trainer, and with the pair trainer when its checks passed, interleaved.
# Carry .dev: unit_tests.xz, trainer.xz, trainer_pair.xz, dwa.tar.xz. Any sm_90; ~7 minutes.
source launch/device_call.sh "$0"
L=${LIMIT:-560}  # seconds this call may take (the run tool's limit less a margin)
unpack_bins unit_tests trainer trainer_pair
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $R/gpu.log 2>&1
step dw_adamw_tests 90 .dev/bin/unit_tests "[dw_adamw]"
C=launch/dw_adamw_bench/check.py
ok=yes
step check_pair_debug 120 python3 $C --lib dwa/libdwa_pair_debug.so --quick --no-time --out $R/check_pair_debug || ok=no
[ $ok = yes ] && { step check_pair 150 python3 $C --lib dwa/libdwa_pair.so --no-time --out $R/check_pair || ok=no; }
[ $ok = yes ] && step same_pair 120 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_pair.so --same-order-free --no-check --no-time --out $R/same_pair
vs="prod prod2"; [ $ok = yes ] && vs="prod pair prod2"
for v in $vs; do
  lib=dwa/libdwa_$v.so; [ "$v" != pair ] && lib=dwa/libdwa.so
  step time_$v 100 python3 $C --lib $lib --no-check --rounds 7 --out $R/time_$v
  step time_${v}_k64 100 python3 $C --lib $lib --no-check --rounds 7 --k 64 --variants fused,today --shapes xl --out $R/time_${v}_k64
done
log "pair checks passed: $ok"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
ns="xl_prod xl_prod2"; [ $ok = yes ] && ns="xl_prod xl_pair xl_prod2 xl_pair2"
for n in $ns; do
  [ $(left $L) -lt 60 ] && { log "skip $n: too little time left"; continue; }
  b=trainer; [ "${n#xl_pair}" != "$n" ] && b=trainer_pair
  step $n 100 .dev/bin/$b configs/xl.json --set device=cuda --set precision=bf16 --set name=$n \
    --set output.results=$R/$n.json $X
done
{
cat $R/gpu.log
tail -2 $R/dw_adamw_tests.log
echo "pair: $(grep -h "failures\|stuck" $R/check_pair_debug.log $R/check_pair.log 2>/dev/null | tr '\n' ' ') same: $(grep -c ": equal" $R/same_pair.log 2>/dev/null) equal, $(grep -c DIFFER $R/same_pair.log 2>/dev/null) differ"
for v in $vs; do
  echo "$v:"; grep -E "block|W13" $R/time_$v.log | tail -4; grep -E " block " $R/time_${v}_k64.log | tail -1
done
for f in $R/xl_*.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['timing']['step']; \
print(sys.argv[1].split('/')[-1], r['status'], t['median_ms'], t['mean_ms'], round(r['memory']['peak_bytes']/2**30, 3), \
r['loss']['per_step'][-1])" $f
done
} > $R/summary.log 2>&1
finish
