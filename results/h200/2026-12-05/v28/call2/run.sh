#!/bin/bash
# v28 call2: the fused kernel ran correct but 1.78x slower than today's path (call1). Is its epilogue starved of
# memory parallelism or is L2 thrashed (the operands re-read from HBM under the epilogue's stream)? The [dw_adamw]
# test with the fix (no clipping), timing with L2 hints (DwAdamWArgs::l2_hints), ncu DRAM bytes of W13, the SASS.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins unit_tests
L=dwa/libdwa.so
C=launch/dw_adamw_bench/check.py
step tests 90 .dev/bin/unit_tests "[dw_adamw]"
step time 150 python3 $C --lib $L --no-check --rounds 7 --shapes xl --out $R/time
step sass 60 bash -c "cuobjdump -sass $L | gzip > $R/sass.txt.gz"
step ncu 150 ncu --csv --launch-count 80 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active \
  python3 $C --lib $L --no-check --rounds 1 --shapes xl --weights W13 --variants fused,fused_h_both,today,gemm_ours --out $R/ncu
tail -8 $R/time.log; tail -3 $R/tests.log
python3 - $R/ncu.log <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit(print("no ncu rows"))
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows[1:]:
    try: agg[r[ki][:60]][r[mi]].append(float(r[vi].replace(",", "")))
    except ValueError: pass
for k, m in agg.items():
    print(k, {n: round(sum(v) / len(v), 1) for n, v in m.items()}, "n", len(next(iter(m.values()))))
PY
cat $R/progress.log
