#!/bin/bash
# v16 call1: where the short-sequence kernels' time goes. ncu (clocks and caches left alone) of every attention,
# RMSNorm, RoPE and SwiGLU kernel in one uncaptured step of xl (2 layers, ctx 512; the kernels' shapes are xl's) and
# of small; then the baseline steps of small and xl (graphs, production build 1819fd4).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
T=.dev/bin/trainer
K='regex:flash|rmsnorm|rope|swiglu|adamw|cross_entropy|embedding'
prof() {  # name args...
  local n=$1; shift
  timeout 150 ncu --clock-control none --cache-control none --kernel-name "$K" --launch-skip 0 --launch-count 400 \
    --metrics gpu__time_duration.sum,dram__bytes.sum,launch__grid_size --csv --print-units base \
    $T "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 \
    --set bench.measure_steps=1 --set name=$n --set output.results=$R/$n.json > $R/$n.csv 2> $R/$n.err; log "$n rc $?"
}
prof ncu_xl2 configs/xl.json --set model.num_layers=2
prof ncu_small configs/small.json
tar czf $OUT/r.tgz -C $OUT r
run() {  # name args...
  local n=$1; shift
  timeout 120 $T "$@" --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
run small configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
run xl configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import csv, collections, os, glob, json
R = os.environ["OUT"] + "/r"
for n in ["ncu_xl2", "ncu_small"]:
    rows = [l for l in open(f"{R}/{n}.csv") if l.startswith('"')]
    agg = collections.OrderedDict()
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum": continue
        k = r["Kernel Name"][:70] + " grid " + ""
        a = agg.setdefault(k, [0, 0.0]); a[0] += 1; a[1] += float(r["Metric Value"].replace(",", ""))
    print("==", n)
    for k, (c, t) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print("%6d x %9.2f us = %9.1f us  %s" % (c, t / c / 1e3, t / 1e3, k))
for f in sorted(glob.glob(R + "/*.json")):
    d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
    print("%-10s step %8.3f ms peak %.3f GiB loss %.5f" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, d["loss"]["final"]))
PY
