#!/bin/bash
# v11 call 3: the 8B 4-block proxy with the 1 GiB head chunk rule (3328 tokens) under none and selective, and a traced
# run; every [cuda] unit test; the production Hopper attention kernels at 16 heads, T 16384 (d 64 / 128) beside SDPA
# (flash bench library built in the background while the proxy runs: the step is GPU-bound).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
(JOBS=12 EXTRA_INC=.dev/inc bash launch/flash_bench/build.sh > $R/fb_build.log 2>&1; echo "rc $?" >> $R/fb_build.log) &
BUILD=$!
T=.dev/bin/trainer
run() { local to=$1 name=$2; shift 2; timeout $to $T configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=2 --set bench.measure_steps=5"
run 150 b8_none $B8 --set checkpointing.policy=none
run 150 b8_selective $B8
run 150 b8_none_again $B8 --set checkpointing.policy=none
run 90 b8_none_traced $B8 --set checkpointing.policy=none --set bench.warmup_steps=1 --set bench.measure_steps=2 --set profile.trace=$R/b8_trace.json
python3 -c "
import json; d=json.load(open('$R/b8_none_traced.json')); print('b8 traced step', d['timing']['step']['mean_ms'])
for r in d['profile']['ranges'][:18]: print('%-30s %6.1f calls %9.2f ms/step %8.3f ms/call' % (r['name'], r['calls_per_step'], r['ms_per_step'], r['ms_per_step']/r['calls_per_step']))
" > $R/b8_traced_summary.txt 2>&1
gzip -f $R/b8_trace.json
tar czf $OUT/r.tgz -C $OUT r
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit cuda rc $?"
tar czf $OUT/r.tgz -C $OUT r
wait $BUILD; log "flash bench build: $(tail -1 $R/fb_build.log)"
left=$(( 570 - ($(date +%s) - t0) ))
if [ $left -gt 30 ]; then timeout $left python3 launch/flash_bench/sm90_check.py --fwd 0,10 --bwd 0,10 --no-check --out $R > $R/sm90_time.log 2>&1; log "sm90 timing rc $?"; fi
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_cuda.log | tail -2
cat $R/b8_traced_summary.txt | head -12
tail -14 $R/sm90_time.log
for f in $R/b8*.json; do python3 -c "
import json; d=json.load(open('$f'))
if 'timing' in d and 'step' in d['timing'] and 'mean_ms' in d['timing']['step']:
    m=d.get('memory',{}); bc=m.get('by_category',{})
    print('%-18s %-4s %8.1f ms (min %.1f) %7.2f GiB planned %7.2f head %.3f GiB' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], d['timing']['step'].get('min_ms',0), m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30, bc.get('head',0)/2**30))
" 2>/dev/null; done
