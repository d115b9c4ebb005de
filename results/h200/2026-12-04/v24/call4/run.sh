#!/bin/bash
# v24 call4: the backward preprocess with a group of lanes per row (passes.cu). ncu of the preprocess / Hopper kernel /
# convert at 16 x 128 T 16384 (as call3), at xl's and small's shapes; the [flash] unit tests; memcheck of the ragged
# every-head-dim case; a small step beside call2's; then every [cuda] test with the time left.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
xz -dc .dev/trainer.xz > .dev/bin/trainer; xz -dc .dev/unit_tests.xz > .dev/bin/unit_tests; chmod +x .dev/bin/*
cp .dev/call4.sh $R/run.sh
log unpacked
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second"
prof() { local n=$1; shift; timeout 200 ncu --clock-control none --kernel-name regex:"flash_bwd" --launch-skip 3 --launch-count 6 $M \
  .dev/bin/trainer "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 --set bench.measure_steps=2 --set name=$n --set output.results=$R/$n.json > $R/$n.txt 2>&1; log "$n rc $?"; }
prof ncu_d128 configs/small.json --set model.d_model=2048 --set model.num_heads=16 --set model.num_layers=1 --set model.context_length=16384 --set data.batch_size=1
prof ncu_xl configs/xl.json --set model.num_layers=1
prof ncu_small configs/small.json --set model.num_layers=1
tar czf $OUT/r.tgz -C $OUT r
timeout 150 .dev/bin/unit_tests "[flash]" > $R/flash_tests.log 2>&1; log "flash tests rc $?"
timeout 120 compute-sanitizer --tool memcheck .dev/bin/unit_tests "flash2 matches naive attention: small and ragged lengths, every head dim" > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 60 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set bench.warmup_steps=5 --set bench.measure_steps=30 --set name=small1 --set output.results=$R/small1.json > $R/small1.log 2>&1; log "small1 rc $?"
tar czf $OUT/r.tgz -C $OUT r
left=$(( 520 - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then timeout $left .dev/bin/unit_tests "[cuda]" > $R/cuda_tests.log 2>&1; log "cuda tests rc $? (limit $left s)"; fi
tar czf $OUT/r.tgz -C $OUT r
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "flash_bwd_pre|flash_bwd_conv|flash_bwd_sm90|gpu__time|dram__bytes" $f | sed -E 's/\(FlashBwdParams.*//' | cut -c1-110 | head -24; done
tail -3 $R/flash_tests.log; grep -E "ERROR SUMMARY" $R/memcheck.log; tail -3 $R/cuda_tests.log 2>/dev/null
cat $R/progress.log
