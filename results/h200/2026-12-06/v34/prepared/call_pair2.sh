#!/bin/bash
# Why DWA_CLUSTER_PAIR's product takes 2x production's (v34, kernels/dw_adamw/NOTES.md, 34th session). The likely
# cause, found after v34 ran (a reviewer, from the cubin): the consumers' remote arrive was `.release.cluster`, which
# compiles to MEMBAR.ALL.GPU a k-block; it is now the default (release, CTA scope) as in CUTLASS. This call checks
# the SASS (cuobjdump: MEMBAR.ALL.GPU left in the pair library only at its three cluster barriers), the bits again,
# and the times: the pair's product should now be at or below production's. Two other questions, each answered by
# one number: (1) are all its clusters resident at once? the pair libraries print
# cudaOccupancyMaxActiveClusters, the SM count and the clusters launched (at most half the SMs' count) on their
# first launch (in the logs; a quarter of the SM count would explain the 2x); (2) is its k-loop
# latency-bound (stage released -> remote arrival -> the peer's multicast)? libdwa_pair_s6.so gives the product alone
# 6 operand stages instead of 4: if gemm_ours moves toward production's, it is. Then ncu of W13's product alone, pair
# and production (launch and cluster stats, SM throughput, warp states), while time is left. Any sm_90; ~3 minutes (~5 with the steps).
# Carry .dev/dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C
# .carry dwa); for the xl steps (run when the pair's xl block beats production's by >= 3%) also .dev/trainer.xz and
# .dev/trainer_pair.xz (launch/dw_adamw_bench/trainer_variant.sh pair -DDWA_CLUSTER_PAIR).
source launch/device_call.sh "$0"
L=${LIMIT:-560}
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
for v in dwa dwa_pair; do
  step sass_$v 60 bash -c "cuobjdump -sass dwa/lib$v.so | grep -cE 'MEMBAR.*GPU|MEMBAR.ALL.GPU'"
done
step check_pair 150 python3 $C --lib dwa/libdwa_pair.so --no-time --out $R/check_pair
step same_pair 120 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_pair.so --same-order-free --no-check --no-time \
  --out $R/same_pair
for v in prod pair pair_s6 prod2; do
  lib=dwa/libdwa_$v.so; [ "${v#prod}" != "$v" ] && lib=dwa/libdwa.so
  step time_$v 100 python3 $C --lib $lib --no-check --rounds 7 --out $R/time_$v
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
  for n in xl_prod xl_pair xl_prod2 xl_pair2; do
    [ $(left $L) -lt 60 ] && break
    b=trainer; [ "${n#xl_pair}" != "$n" ] && b=trainer_pair
    step $n 100 .dev/bin/$b configs/xl.json --set device=cuda --set precision=bf16 --set name=$n \
      --set output.results=$R/$n.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  done
fi
for v in prod pair; do
  [ $(left $L) -lt 120 ] && break
  lib=dwa/libdwa_$v.so; [ $v = prod ] && lib=dwa/libdwa.so
  step ncu_$v 100 ncu --set full --kernel-name regex:dw_adamw_kernel --launch-skip 2 --launch-count 1 \
    -o $R/ncu_$v python3 $C --lib $lib --no-check --rounds 1 --shapes xl --weights W13 --variants gemm_ours --out $R/n_$v
  ncu -i $R/ncu_$v.ncu-rep --page details > $R/ncu_$v.details.log 2>&1
  rm -f $R/ncu_$v.ncu-rep; save
done
{
echo "MEMBAR ... GPU in the SASS: production $(cat $R/sass_dwa.log), pair $(cat $R/sass_dwa_pair.log)"
echo "pair: $(grep -h failures $R/check_pair.log) same: $(grep -c ": equal" $R/same_pair.log) equal, $(grep -c DIFFER $R/same_pair.log) differ"
grep -h "cudaOccupancyMaxActiveClusters" $R/*.log | sort -u
for v in prod pair pair_s6 prod2; do echo "$v:"; grep -E " block |W13" $R/time_$v.log | tail -4; done
for v in prod pair; do
  [ -f $R/ncu_$v.details.log ] && { echo "ncu $v:"; grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Cluster|Waves Per SM|Grid Size" $R/ncu_$v.details.log | head -14; }
done
for f in $R/xl_*.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['timing']['step']; \
print(sys.argv[1].split('/')[-1], r['status'], t['median_ms'], t['mean_ms'], round(r['memory']['peak_bytes']/2**30, 3))" $f
done
} > $R/summary.log 2>&1
finish
