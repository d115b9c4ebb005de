#!/bin/bash
# v15 call5 (final code: the mma.sync kernels' backward split rule as before, min_gain 1; the Hopper kernel's as in
# call3 / call4): every [cuda] unit test; trainer small and the d 96 model at context 512
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/unit_tests.xz .dev/bin/unit_tests; unxz .dev/trainer.xz .dev/bin/trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
timeout 170 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
run() {  # name args...
  local n=$1; shift
  timeout 100 .dev/bin/trainer "$@" --set device=cuda --set precision=bf16 --set bench.warmup_steps=5 \
    --set bench.measure_steps=30 --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
run small configs/small.json
run d96_flash2_c512 configs/small.json --set model.num_heads=8
tar czf $OUT/r.tgz -C $OUT r
tail -2 $R/unit_cuda.log
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*.json")):
    d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
    print("%-16s step %8.3f ms  peak %.3f GiB  predicted %.3f  loss %.6f" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, m["predicted"]["peak_bytes"] / 2**30, d["loss"]["final"]))
PY
cat $R/progress.log
