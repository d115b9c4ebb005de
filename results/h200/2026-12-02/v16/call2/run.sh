#!/bin/bash
# v16 call2: the backward's passes (preprocess, convert) rewritten; the Hopper backward in the tile kernels' CTA
# order (tile_coord); RMSNorm backward in runs of >= 8 rows. Float64 checks of the flash library (bench.py: every
# dtype / head dim / mode; sm90_check: the Hopper variants incl. the CTA-order ones), CTA-order timings, ncu of the
# kernels in old and new trainer builds, and the steps (small, xl) old / new alternating.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin .carry/flash
unxz .dev/lib.xz .carry/flash/libflashbench.so
unxz .dev/trainer.xz .dev/bin/trainer; unxz .dev/trainer_old.xz .dev/bin/trainer_old
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
L=.carry/flash/libflashbench.so
timeout 200 python3 launch/flash_bench/bench.py --lib $L --no-time --out $R > $R/bench_checks.log 2>&1; log "bench checks rc $?"
cd launch/flash_bench
timeout 120 python3 sm90_check.py --lib ../../$L --prod ../../$L --fwd "" --bwd 0,4,5,20,24,25,10,14,15,31 --no-time --out $R/chk > $R/sm90_checks.log 2>&1; log "sm90 checks rc $?"
timeout 120 python3 sm90_check.py --lib ../../$L --prod ../../$L --fwd "" --bwd 0,4,5,20,24,25,10,14,15 --no-check \
  --shapes 4x512x32x80,4x2048x32x80,4x512x12x64,4x512x16x64,4x512x20x64,4x512x8x128,1x16384x16x64 --out $R/order > $R/order.log 2>&1; log "order rc $?"
cd ../..
tar czf $OUT/r.tgz -C $OUT r
K='regex:flash|rmsnorm'
prof() {  # name binary args...
  local n=$1 b=$2; shift 2
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "$K" --launch-count 300 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $b "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 \
    --set bench.measure_steps=1 --set name=$n --set output.results=$R/$n.json > $R/$n.csv 2> $R/$n.err; log "$n rc $?"
}
prof ncu_xl2_old .dev/bin/trainer_old configs/xl.json --set model.num_layers=2
prof ncu_xl2_new .dev/bin/trainer configs/xl.json --set model.num_layers=2
prof ncu_small_old .dev/bin/trainer_old configs/small.json --set model.num_layers=2
prof ncu_small_new .dev/bin/trainer configs/small.json --set model.num_layers=2
tar czf $OUT/r.tgz -C $OUT r
run() {  # name binary args...
  local n=$1 b=$2; shift 2
  timeout 100 $b "$@" --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2; do
  run small_old$i .dev/bin/trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$i .dev/bin/trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
run xl_old .dev/bin/trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
run xl_new .dev/bin/trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
tail -4 $R/bench_checks.log; tail -4 $R/sm90_checks.log
grep -E " bwd " $R/order.log | head -90
python3 - <<'PY'
import csv, collections, os, glob, json
R = os.environ["OUT"] + "/r"
for n in ["ncu_xl2_old", "ncu_xl2_new", "ncu_small_old", "ncu_small_new"]:
    try: rows = [l for l in open(f"{R}/{n}.csv") if l.startswith('"')]
    except Exception as e: print(n, e); continue
    agg = collections.OrderedDict()
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum": continue
        k = r["Kernel Name"][:60]
        a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += float(r["Metric Value"].replace(",", ""))
    print("==", n)
    for k, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print("%6d x %8.2f us = %8.1f us  %s" % (c, t / c / 1e3, t / 1e3, k))
for f in sorted(glob.glob(R + "/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        print("%-14s step %8.3f ms peak %.3f GiB pred %.3f loss %.5f" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, m["predicted"]["peak_bytes"] / 2**30, d["loss"]["final"]))
    except Exception as e: pass
PY
cat $R/progress.log
