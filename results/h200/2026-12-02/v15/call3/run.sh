#!/bin/bash
# v15 call3 (final code): d 96 production = three consumers (forward) / d 64's budget (backward); the Hopper forward
# from one query tile for every second SM; the backward's split rule. float64 checks of every variant and bitwise
# forward comparison; timing (d 96 shapes, few-CTA shapes: production dispatch vs the Hopper kernels called
# directly); smoke under racecheck / memcheck / synccheck; every [cuda] unit test; trainer: d 96 model flash2 vs naive,
# small and xl ctx 512
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash .dev/bin
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke
unxz .dev/unit_tests.xz .dev/bin/unit_tests; unxz .dev/trainer.xz .dev/bin/trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
cd launch/flash_bench
L=../../.carry/flash/libflashbench.so
timeout 200 python3 sm90_check.py --lib $L --prod $L --fwd 32,30,31,33,0,10,20 --bwd 31,30,0,10,20 --d96 \
  --shapes 1x16384x1x128,1x8192x1x128,1x4096x1x128,2x512x8x128,4x512x6x64,4x512x8x96,1x16384x1x64 \
  --out $R > $R/sm90_check.log 2>&1; log "check rc $?"
cd ../..
tar czf $OUT/r.tgz -C $OUT r
for tool in racecheck memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool .carry/flash/smoke > $R/${tool}_smoke.log 2>&1; log "$tool rc $?"
done
timeout 170 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
timeout 30 .dev/bin/unit_tests "[planner]" -s > $R/unit_planner.log 2>&1; log "unit [planner] rc $?"
tar czf $OUT/r.tgz -C $OUT r
run() {  # name args...
  local n=$1; shift
  timeout 100 .dev/bin/trainer "$@" --set device=cuda --set precision=bf16 --set bench.warmup_steps=5 \
    --set bench.measure_steps=30 --set name=$n --set output.results=$R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
for ctx in 512 4096; do for att in flash2 naive; do
  run d96_${att}_c$ctx configs/small.json --set model.num_heads=8 --set model.context_length=$ctx --set attention=$att
done; done
run small configs/small.json
run xl_c512 configs/xl.json
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|bit for bit|worst|FAIL" $R/sm90_check.log | head -40; grep -h "SUMMARY\|smoke:" $R/*_smoke.log
tail -2 $R/unit_cuda.log; grep -E "skipped|passed|failed" $R/unit_planner.log | tail -3
grep -E "x96|x1x|2x8x128|4x6x64" $R/sm90_check.log
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]; m = d["memory"]
        pr = m.get("predicted", {}).get("peak_bytes", 0)
        print("%-16s step %8.3f ms  peak %.3f GiB  predicted %.3f  loss %.6f" % (os.path.basename(f)[:-5], t["mean_ms"], m["peak_bytes"] / 2**30, pr / 2**30, d["loss"]["final"]))
    except Exception as e:
        pass
PY
cat $R/progress.log
