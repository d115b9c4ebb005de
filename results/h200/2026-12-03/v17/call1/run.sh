#!/bin/bash
# v17 call1: the sixteenth session's code (flash backward passes, Hopper backward in tile order, RMSNorm backward in
# runs of 2 rows) plus optimizer.in_backward null (auto, on for strategy none without clipping). Every [cuda] unit
# test; racecheck / memcheck of the RMSNorm and attention tests; ncu of the attention and RMSNorm kernels (old / new); trainer small / xl (default = in_backward on, and
# in_backward=false as before) alternating with the previous production build (1819fd4, `*_old*`).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer; unxz .dev/unit_tests.xz .dev/bin/unit_tests
unxz .dev/trainer_old.xz .dev/bin/trainer_old
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 60 compute-sanitizer --tool racecheck .dev/bin/unit_tests "[cuda][rmsnorm]" > $R/racecheck_rmsnorm.log 2>&1; log "racecheck rmsnorm rc $?"
timeout 90 compute-sanitizer --tool memcheck .dev/bin/unit_tests "[cuda][rmsnorm]" > $R/memcheck_rmsnorm.log 2>&1; log "memcheck rmsnorm rc $?"
timeout 120 compute-sanitizer --tool memcheck .dev/bin/unit_tests "[cuda][attention]" > $R/memcheck_attention.log 2>&1; log "memcheck attention rc $?"
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
prof ncu_xl2_new .dev/bin/trainer configs/xl.json --set model.num_layers=2 --set optimizer.in_backward=false
prof ncu_small_old .dev/bin/trainer_old configs/small.json --set model.num_layers=2
prof ncu_small_new .dev/bin/trainer configs/small.json --set model.num_layers=2 --set optimizer.in_backward=false
tar czf $OUT/r.tgz -C $OUT r
run() {  # name config args...  (TB: the binary)
  local n=$1 c=$2; shift 2
  timeout 120 ${TB:-.dev/bin/trainer} $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
for i in 1 2 3; do
  TB=.dev/bin/trainer_old run small_old$i configs/small.json $S
  run small_off$i configs/small.json $S --set optimizer.in_backward=false
  run small_auto$i configs/small.json $S
done
tar czf $OUT/r.tgz -C $OUT r
for i in 1 2; do
  TB=.dev/bin/trainer_old run xl_old$i configs/xl.json $X
  run xl_off$i configs/xl.json $X --set optimizer.in_backward=false
  run xl_auto$i configs/xl.json $X
done
tar czf $OUT/r.tgz -C $OUT r
tail -3 $R/unit_cuda.log
for f in racecheck_rmsnorm memcheck_rmsnorm memcheck_attention; do echo "$f: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' $R/$f.log | tail -1) | $(tail -2 $R/$f.log | head -1)"; done
python3 - <<'PY'
import os, glob, json, csv, collections
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
        print("%6d x %8.2f us  %s" % (c, t / c / 1e3, k))
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        print("%-14s step %8.3f ms peak %.3f GiB pred %.3f loss %.5f in_bwd %s" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, m["predicted"]["peak_bytes"] / 2**30, d["loss"]["final"], d["config"]["optimizer"].get("in_backward")))
    except Exception as e: print(f, e)
PY
cat $R/progress.log
