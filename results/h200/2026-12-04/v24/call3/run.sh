#!/bin/bash
# v24 call3: where the d 128 attention backward's time goes at 16 heads x T 16384 (causal): the preprocess (D, zeroing
# dq_accum), the Hopper kernel and the dQ convert, from a one-layer trainer step (d_model 2048, 16 heads: d_head 128,
# ctx 16384, batch 1; uncaptured) under ncu with the clocks as they are.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
gzip -dc .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/trainer
cp .dev/call3.sh $R/run.sh
A="configs/small.json --set model.d_model=2048 --set model.num_heads=16 --set model.num_layers=1 --set model.context_length=16384 --set data.batch_size=1 --set device=cuda --set precision=bf16 --set cuda_graph=false"
timeout 120 .dev/bin/trainer $A --set bench.warmup_steps=2 --set bench.measure_steps=5 --set name=d128_step --set output.results=$R/d128_step.json > $R/d128_step.log 2>&1; log "step rc $?"
timeout 300 ncu --clock-control none --kernel-name regex:"flash_bwd|flash_fwd_sm90" --launch-skip 4 --launch-count 8 \
  --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second \
  .dev/bin/trainer $A --set bench.warmup_steps=1 --set bench.measure_steps=2 --set name=ncu --set output.results=$R/ncu_run.json > $R/ncu.txt 2>&1; log "ncu rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "flash_|gpu__time|dram__bytes|per_second" $R/ncu.txt | sed -E 's/\(int, int, int\)//' | cut -c1-160 | tail -60
cat $R/progress.log
