#!/bin/bash
# v21 call2: ncu source page of the d 64 backward with the new dq_swizzle (variant 7, 16 x 64, T 16384, causal);
# train steps of the previous binary (trainer_old, HEAD 9a03c76) and the new one alternating.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_new.tar.xz && (cd .dev && tar xJf trainers.tar.xz)
cp .dev/call2.sh $R/run.sh
log unpacked
timeout 150 ncu --clock-control none --kernel-name regex:flash_bwd_sm90 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight --page source --print-source sass --csv python3 launch/flash_bench/sm90_check.py --lib .dev/flash_new/libflashbench.so --prod .dev/flash_new/libflashbench.so --profile --fwd "" --bwd 7 > $R/ncu_src_v7.csv 2> $R/ncu_src_v7.err; log "ncu rc $?"
gzip -9 $R/ncu_src_v7.csv
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
for k in 1 2; do
  run small4k_old$k trainer_old configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
  run small4k_new$k trainer_new configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
  run small_old$k trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$k trainer_new configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
run medium_old trainer_old configs/medium.json --set bench.warmup_steps=3 --set bench.measure_steps=15
run medium_new trainer_new configs/medium.json --set bench.warmup_steps=3 --set bench.measure_steps=15
tar czf $OUT/r.tgz -C $OUT r
grep -h "done:" $R/*.log
cat $R/progress.log
