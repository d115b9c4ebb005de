#!/bin/bash
# v18 call1: cuBLASLt autotuning over more heuristic candidates (TRAINER_GEMM_CANDIDATES 8 = today, 32, 64):
# small and xl (bs 4, ctx 512, bf16) steps alternating, and each run's tuned sum of one call per shape; then every
# [cuda] unit test (block_sum is block_sum_k<1> in common.cuh now).
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
run() {  # name candidates config args...
  local n=$1 k=$2 c=$3; shift 3
  TRAINER_GEMM_CANDIDATES=$k timeout 150 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2; do
  for k in 8 32 64; do run small_k${k}_$i $k configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30; done
done
tar czf $OUT/r.tgz -C $OUT r
for i in 1 2; do
  for k in 8 32; do run xl_k${k}_$i $k configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10; done
done
tar czf $OUT/r.tgz -C $OUT r
# ncu of the RMSNorm kernels (why does xl's backward take ~27 us for ~52 MB?)
for ms in small:20 xl:60; do
  m=${ms%:*}; skip=${ms#*:}
  timeout 150 ncu --clock-control none --cache-control none --kernel-name regex:rmsnorm --launch-skip $skip --launch-count 10 \
    --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_warps,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum,sm__maximum_warps_per_active_cycle_pct \
    --csv --print-units base .dev/bin/trainer configs/$m.json --set device=cuda --set precision=bf16 --set cuda_graph=false \
    --set bench.warmup_steps=1 --set bench.measure_steps=1 --set output.results=$R/ncu_$m.json > $R/ncu_rmsnorm_$m.csv 2> $R/ncu_rmsnorm_$m.err
  log "ncu $m rc $?"
done
timeout 150 ncu --clock-control none --cache-control none --kernel-name regex:rmsnorm_bwd_vec --launch-skip 4 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
  --section SchedulerStats .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set cuda_graph=false \
  --set bench.warmup_steps=0 --set bench.measure_steps=1 --set output.results=$R/ncu_xl_detail.json > $R/ncu_rmsnorm_xl_detail.txt 2>&1
log "ncu detail rc $?"
tar czf $OUT/r.tgz -C $OUT r
log "unit tests [cuda]"
unxz .dev/unit_tests.xz .dev/bin/unit_tests
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit_tests rc $?"; tail -3 $R/unit_cuda.log
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
        t = d["timing"]["step"]; m = d["memory"]; g = d.get("gemm_autotune", {})
        print("%-14s step %8.3f ms (min %s) peak %.3f GiB  tune %s" % (n, t["mean_ms"], t.get("min_ms"), m["peak_bytes"] / 2**30, json.dumps(g)[:200]))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
