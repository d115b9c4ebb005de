#!/bin/bash
# v15 call2: the backward's split rule (Hopper: one CTA per SM, split only where it at least halves the time) and
# d 96 in the trainer: d 96 forward tiles in interleaved rounds; few-CTA shapes (production
# dispatch vs the Hopper kernels called directly); trainer small / medium old vs new build alternating; d 96 model
# (small with 8 heads) flash2 vs naive at context 512 and 4096
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash .dev/bin
unxz .dev/lib.xz .carry/flash/libflashbench.so
unxz .dev/trainer.xz .dev/bin/trainer; unxz .dev/trainer_old.xz .dev/bin/trainer_old
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
cd launch/flash_bench
L=../../.carry/flash/libflashbench.so
timeout 120 python3 sm90_check.py --lib $L --prod $L --fwd 30,32 --bwd "" --rounds 7 --d96 --out $R/rounds > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 100 python3 sm90_check.py --lib $L --prod $L --fwd 10,0,30 --bwd 10,0,30 --no-check \
  --shapes 1x16384x1x128,1x8192x1x128,2x512x8x128,4x512x6x64,4x512x8x96,4x512x12x64,4x512x16x64,1x16384x1x64 \
  --out $R/split > $R/split.log 2>&1; log "split rc $?"
cd ../..
tar czf $OUT/r.tgz -C $OUT r
run() {  # name binary args...
  local n=$1 b=$2; shift 2
  timeout 100 $b "$@" --set device=cuda --set precision=bf16 --set bench.warmup_steps=5 --set bench.measure_steps=30 \
    --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2; do
  run small_old$i .dev/bin/trainer_old configs/small.json
  run small_new$i .dev/bin/trainer configs/small.json
  run medium_old$i .dev/bin/trainer_old configs/small.json --set model.preset=medium
  run medium_new$i .dev/bin/trainer configs/small.json --set model.preset=medium
done
tar czf $OUT/r.tgz -C $OUT r
for ctx in 512 4096; do for att in flash2 naive; do
  run d96_${att}_c$ctx .dev/bin/trainer configs/small.json --set model.num_heads=8 --set model.context_length=$ctx --set attention=$att
done; done
tar czf $OUT/r.tgz -C $OUT r
tail -25 $R/rounds.log
grep -E "prod|v10|v0 |v30" $R/split.log | grep -v "16 T16384\|x16x" 
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        pr = m.get("predicted", {}).get("peak_bytes", 0)
        print("%-16s step %8.3f ms  peak %.3f GiB  predicted %.3f  loss %.6f" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, pr / 2**30, d["loss"]["final"]))
    except Exception as e:
        print(f, e)
PY
cat $R/progress.log
