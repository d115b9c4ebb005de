#!/bin/bash
# v11 call 5: the final binary (no experiment knob): the 8B 4-block proxy, head in 3328-token chunks (policies none,
# selective) against the whole head (lm_head_chunk_tokens 32768, 9.8 GiB) in the same call, alternating.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv > $R/gpu.txt
T=.dev/bin/trainer
run() { local to=$1 name=$2; shift 2; timeout $to $T configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=2 --set bench.measure_steps=5"
run 150 b8_none $B8 --set checkpointing.policy=none
run 150 b8_none_whole $B8 --set checkpointing.policy=none --set checkpointing.lm_head_chunk_tokens=32768
run 150 b8_selective $B8
run 150 b8_none_again $B8 --set checkpointing.policy=none
run 150 b8_none_whole_again $B8 --set checkpointing.policy=none --set checkpointing.lm_head_chunk_tokens=32768
log done
tar czf $OUT/r.tgz -C $OUT r
cat $R/gpu.txt
for f in $R/b8*.json; do python3 -c "
import json; d=json.load(open('$f'))
if 'timing' in d and 'step' in d['timing'] and 'mean_ms' in d['timing']['step']:
    m=d.get('memory',{}); bc=m.get('by_category',{})
    print('%-20s %-4s %8.1f ms (min %.1f) %7.2f GiB planned %7.2f head %.3f GiB' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], d['timing']['step'].get('min_ms',0), m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30, bc.get('head',0)/2**30))
" 2>/dev/null; done
