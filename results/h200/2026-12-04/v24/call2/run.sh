#!/bin/bash
# v24 call2: production (HEAD + the bootstrap mend, no kernel change) beside the PyTorch peer in one call: xl ctx 512
# (compile default and reduce-overhead; max-autotune-no-cudagraphs was call1's), small (reduce-overhead, its fastest).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
gzip -dc .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/trainer
cp .dev/call2.sh $R/run.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
log unpacked
run() { local n=$1 c=$2; shift 2; timeout 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"; }
peer() { local n=$1; shift; timeout 200 python3 launch/torch_bench.py --mode compiled "$@" --json $R/$n.json > $R/$n.log 2>&1; log "$n rc $?"; }
run small1 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
peer torch_small_ro --preset small --compile-mode reduce-overhead --warmup 5 --steps 30
run small2 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
tar czf $OUT/r.tgz -C $OUT r
run xl1 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
peer torch_xl_ro --preset xl --compile-mode reduce-overhead --warmup 3 --steps 10
run xl2 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
if [ $(( $(date +%s) - t0 )) -lt 420 ]; then peer torch_xl_default --preset xl --compile-mode default --warmup 3 --steps 10; fi
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        print("%-20s step %8.3f ms (median %8.3f) peak %.2f GiB" % (n, t["mean_ms"], t["median_ms"], m["peak_bytes"] / 2**30))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
