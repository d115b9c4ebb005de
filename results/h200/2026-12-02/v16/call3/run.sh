#!/bin/bash
# v16 call3: RMSNorm backward in runs of 2 rows with both rows' loads in flight (call2's runs of 8 were slower), the
# forward's w loaded with x; every [cuda] unit test; ncu of the kernels; steps old (1819fd4) / new alternating.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/unit_tests.xz .dev/bin/unit_tests; unxz .dev/trainer.xz .dev/bin/trainer; unxz .dev/trainer_old.xz .dev/bin/trainer_old
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
K='regex:flash|rmsnorm'
prof() {  # name binary args...
  local n=$1 b=$2; shift 2
  timeout 100 ncu --clock-control none --cache-control none --kernel-name "$K" --launch-count 300 \
    --metrics gpu__time_duration.sum --csv --print-units base \
    $b "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 \
    --set bench.measure_steps=1 --set name=$n --set output.results=$R/$n.json > $R/$n.csv 2> $R/$n.err; log "$n rc $?"
}
prof ncu_xl2_new .dev/bin/trainer configs/xl.json --set model.num_layers=2
prof ncu_small_new .dev/bin/trainer configs/small.json --set model.num_layers=2
tar czf $OUT/r.tgz -C $OUT r
run() {  # name binary args...
  local n=$1 b=$2; shift 2
  timeout 100 $b "$@" --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2 3; do
  run small_old$i .dev/bin/trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$i .dev/bin/trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
for i in 1 2; do
  run xl_old$i .dev/bin/trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  run xl_new$i .dev/bin/trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
done
tar czf $OUT/r.tgz -C $OUT r
tail -3 $R/unit_cuda.log
python3 - <<'PY'
import csv, collections, os, glob, json
R = os.environ["OUT"] + "/r"
for n in ["ncu_xl2_new", "ncu_small_new"]:
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
