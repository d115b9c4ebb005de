#!/bin/bash
# v24 call1: the xl peer in torch.compile's third mode (max-autotune-no-cudagraphs, never measured at xl: issue 19
# item 5), beside production (HEAD) in the same call; reduce-overhead follows if time is left.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
gzip -dc .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/trainer
cp .dev/call1.sh $R/run.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
python3 -c "import torch; print(torch.__version__)" >> $R/gpu.txt 2>&1
log unpacked
run() { local n=$1 c=$2; shift 2; timeout 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"; }
peer() { local n=$1 to=$2; shift 2; timeout $to python3 launch/torch_bench.py --mode compiled "$@" --json $R/$n.json > $R/$n.log 2>&1; log "$n rc $?"; }
run xl1 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
peer torch_xl_mant $(( 560 - ($(date +%s) - t0) )) --preset xl --compile-mode max-autotune-no-cudagraphs --warmup 3 --steps 10
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
