#!/bin/bash
# The 33rd session's kernel experiment, DWA_CLUSTER_PAIR (kernels/dw_adamw/dw_adamw_sm90.cu; the design in
# kernels/dw_adamw/NOTES.md): clusters of two CTAs that share one operand panel by TMA multicast, operand reads from
# L2 -25%. Built, reviewed, not yet run: the float64 checks under the hang check first (a peer's missing arrival
# prints and traps instead of hanging), then without, a bitwise comparison with production (same tiles and
# arithmetic per element: p, m, v and p_work should be equal; the sum of g^2 is summed over other CTAs' tiles, so it
# is left out), then times at K 2048 and K 64 beside production,
# production first and last. Predicted: an xl block 1.41 -> ~1.2 ms if the kernel is L2-bound. Any sm_90; ~3 minutes.
# Then, if the pair's xl block beats production's by >= 3% and .dev holds both trainers, the xl bf16 step (in_gemm
# auto) with each, interleaved (~3 minutes more).
# Carry .dev: dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C .carry
# dwa), and for the steps trainer.xz (xz -T2 -c build-cuda/trainer > .dev/trainer.xz) and trainer_pair.xz
# (launch/dw_adamw_bench/trainer_variant.sh pair -DDWA_CLUSTER_PAIR).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
step check_pair_debug 120 python3 $C --lib dwa/libdwa_pair_debug.so --quick --no-time --out $R/check_pair_debug
step check_pair 150 python3 $C --lib dwa/libdwa_pair.so --no-time --out $R/check_pair
step same_pair 120 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_pair.so --same-order-free --no-check --no-time --out $R/same_pair
for v in prod pair prod2; do
  lib=dwa/libdwa_$v.so; [ "$v" != pair ] && lib=dwa/libdwa.so
  step time_$v 100 python3 $C --lib $lib --no-check --rounds 7 --out $R/time_$v
  step time_${v}_k64 100 python3 $C --lib $lib --no-check --rounds 7 --k 64 --variants fused,today --shapes xl --out $R/time_${v}_k64
done
win=$(python3 - $R <<'PY'
import json, os, sys
def block(n):
    try:
        rows = json.load(open(os.path.join(sys.argv[1], n, "dwa_check.json")))["timing"]
        return sum(x["median_ms"]["fused"] for x in rows if x["block"] == "xl")
    except Exception:
        return None
prod = [b for b in (block("time_prod"), block("time_prod2")) if b]
pair = block("time_pair")
print("yes" if prod and pair and pair < 0.97 * min(prod) else "no")
PY
)
log "pair wins the bench by >= 3%: $win"
if [ "$win" = yes ] && [ -f .dev/trainer.xz ] && [ -f .dev/trainer_pair.xz ]; then
  unpack_bins trainer trainer_pair
  X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
  for n in xl_prod xl_pair xl_prod2 xl_pair2; do
    b=trainer; [ "${n#xl_pair}" != "$n" ] && b=trainer_pair
    step $n 120 .dev/bin/$b configs/xl.json --set device=cuda --set precision=bf16 --set name=$n \
      --set output.results=$R/$n.json $X
  done
fi
{
echo "pair: $(grep -h "failures\|stuck" $R/check_pair_debug.log $R/check_pair.log | tr '\n' ' ') same: $(grep -c ": equal" $R/same_pair.log) equal, $(grep -c DIFFER $R/same_pair.log) differ"
for v in prod pair prod2; do
  echo "$v:"; grep -E "block|W13" $R/time_$v.log | tail -4; grep -E " block " $R/time_${v}_k64.log | tail -1
done
for f in $R/xl_*.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['timing']['step']; \
print(sys.argv[1].split('/')[-1], r['status'], t['median_ms'], t['mean_ms'], round(r['memory']['peak_bytes']/2**30, 3), \
r['loss']['per_step'][-1])" $f
done
} > $R/summary.log 2>&1
finish
