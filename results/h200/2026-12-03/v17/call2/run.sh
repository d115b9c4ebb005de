#!/bin/bash
# v17 call2: the PyTorch peer beside the trainer in one call (issue 19's ratios): torch.compile reduce-overhead for
# small, default for xl (bs 4, ctx 512 and 2048, bf16); the trainer's default runs of the
# same (optimizer.in_backward auto: on) between them.
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
run() {  # name config args...
  local n=$1 c=$2; shift 2
  timeout 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
peer() {  # name args...
  local n=$1; shift
  timeout 200 python3 launch/torch_bench.py --mode compiled "$@" --json $R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
run small1 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
peer torch_small_ro --preset small --compile-mode reduce-overhead --warmup 5 --steps 30
run small2 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
tar czf $OUT/r.tgz -C $OUT r
run xl1 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
peer torch_xl_default --preset xl --compile-mode default --warmup 3 --steps 10
run xl2 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
peer torch_xl2048_default --preset xl --ctx 2048 --compile-mode default --warmup 2 --steps 5
run xl2048 configs/xl.json --set bench.warmup_steps=2 --set bench.measure_steps=5 --set model.context_length=2048
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
        t = d["timing"]["step"]; m = d["memory"]; pred = m.get("predicted", {}).get("peak_bytes")
        print("%-22s step %8.3f ms peak %.3f GiB %s %s" % (n, t["mean_ms"], m["peak_bytes"] / 2**30,
              "pred %.3f" % (pred / 2**30) if pred else "", d.get("status", "")))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
