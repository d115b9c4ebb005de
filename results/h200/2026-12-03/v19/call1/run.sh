#!/bin/bash
# v19 call1: every [cuda] unit test of the working tree (HEAD 762f206's kernels + the side lane, off by default);
# a PyTorch microbench of one layer's backward GEMMs with the weight-gradient GEMMs on a side stream; small and xl
# steps alternating: old = 762f206, new0 = side lane off, new1 = side lane on (TRAINER_WGRAD_LANE, experiment);
# small with gemm_autotune off, lane off / on, for bit equality of the losses; an xl trace (uncaptured).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/trainer_old.xz .dev/bin/trainer_old
unxz .dev/unit_tests.xz .dev/bin/unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
run() {  # name lane binary config args...
  local n=$1 lane=$2 b=$3 c=$4; shift 4
  TRAINER_WGRAD_LANE=$lane timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2 3; do
  run small_old$i 0 trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_lane0_$i 0 trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_lane1_$i 1 trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
run small_exact0 0 trainer configs/small.json --set bench.warmup_steps=2 --set bench.measure_steps=8 --set gemm_autotune=false
run small_exact1 1 trainer configs/small.json --set bench.warmup_steps=2 --set bench.measure_steps=8 --set gemm_autotune=false
tar czf $OUT/r.tgz -C $OUT r
for i in 1 2; do
  run xl_old$i 0 trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  run xl_lane0_$i 0 trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  run xl_lane1_$i 1 trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
done
tar czf $OUT/r.tgz -C $OUT r
timeout 100 python3 .dev/sidebench.py > $R/sidebench.log 2>&1; log "sidebench rc $?"
tar czf $OUT/r.tgz -C $OUT r
timeout 150 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $? $(tail -2 $R/unit_cuda.log | head -1)"
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        print("%-16s step %8.3f ms peak %.3f GiB final loss %r" % (n, t["mean_ms"], m["peak_bytes"] / 2**30, d["loss"]["final"]))
    except Exception as e: print(n, "?", e)
a, b = [json.load(open(R + "/small_exact%d.json" % i)) for i in (0, 1)]
print("exact: per-step losses equal:", a["loss"]["per_step"] == b["loss"]["per_step"], "grad norms equal:", a.get("grad_norm") == b.get("grad_norm"), "final", a["loss"]["final"], b["loss"]["final"])
PY
tail -12 $R/sidebench.log
cat $R/progress.log
