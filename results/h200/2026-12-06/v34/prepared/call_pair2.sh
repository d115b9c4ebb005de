#!/bin/bash
# Why DWA_CLUSTER_PAIR's product takes 2x production's (v34, kernels/dw_adamw/NOTES.md, 34th session). Two
# questions, each answered by one number: (1) are all its clusters resident at once? the pair libraries print
# cudaOccupancyMaxActiveClusters, the SM count and the clusters launched (at most half the SMs' count) on their
# first launch (in the logs; a quarter of the SM count would explain the 2x); (2) is its k-loop
# latency-bound (stage released -> remote arrival -> the peer's multicast)? libdwa_pair_s6.so gives the product alone
# 6 operand stages instead of 4: if gemm_ours moves toward production's, it is. Then ncu of W13's product alone, pair
# and production (launch and cluster stats, SM throughput, warp states), while time is left. Any sm_90; ~3 minutes.
# Carry .dev/dwa.tar.xz (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C
# .carry dwa).
source launch/device_call.sh "$0"
L=${LIMIT:-560}
unpack_tar .dev/dwa.tar.xz
C=launch/dw_adamw_bench/check.py
step check_pair 150 python3 $C --lib dwa/libdwa_pair.so --no-time --out $R/check_pair
step same_pair 120 python3 $C --lib dwa/libdwa.so --same-as dwa/libdwa_pair.so --same-order-free --no-check --no-time \
  --out $R/same_pair
for v in prod pair pair_s6 prod2; do
  lib=dwa/libdwa_$v.so; [ "${v#prod}" != "$v" ] && lib=dwa/libdwa.so
  step time_$v 100 python3 $C --lib $lib --no-check --rounds 7 --shapes xl --out $R/time_$v
done
for v in prod pair; do
  [ $(left $L) -lt 120 ] && break
  lib=dwa/libdwa_$v.so; [ $v = prod ] && lib=dwa/libdwa.so
  step ncu_$v 100 ncu --set full --kernel-name regex:dw_adamw_kernel --launch-skip 2 --launch-count 1 \
    -o $R/ncu_$v python3 $C --lib $lib --no-check --rounds 1 --shapes xl --weights W13 --variants gemm_ours --out $R/n_$v
  ncu -i $R/ncu_$v.ncu-rep --page details > $R/ncu_$v.details.log 2>&1
  rm -f $R/ncu_$v.ncu-rep; save
done
{
echo "pair: $(grep -h failures $R/check_pair.log) same: $(grep -c ": equal" $R/same_pair.log) equal, $(grep -c DIFFER $R/same_pair.log) differ"
grep -h "cudaOccupancyMaxActiveClusters" $R/*.log | sort -u
for v in prod pair pair_s6 prod2; do echo "$v:"; grep -E " block |W13" $R/time_$v.log | tail -2; done
for v in prod pair; do
  [ -f $R/ncu_$v.details.log ] && { echo "ncu $v:"; grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Cluster|Waves Per SM|Grid Size" $R/ncu_$v.details.log | head -14; }
done
} > $R/summary.log 2>&1
finish
