#!/bin/bash
# v18 call4: the PyTorch peer's reduce-overhead mode at xl (bs 4, ctx 512, bf16; not measured there before), beside
# one more pair of trainer steps (ef295e5 "old" and the new RMSNorm build).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/trainer_old.xz .dev/bin/trainer_old
log unpacked
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
run xl_new3 trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
timeout 200 python3 launch/torch_bench.py --mode compiled --preset xl --compile-mode reduce-overhead --warmup 3 --steps 10 --json $R/torch_xl_ro.json > $R/torch_xl_ro.log 2>&1; log "torch_xl_ro rc $?"
tar czf $OUT/r.tgz -C $OUT r
run xl_old3 trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        print("%-16s step %8.3f ms peak %.3f GiB" % (n, t["mean_ms"], m["peak_bytes"] / 2**30))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
