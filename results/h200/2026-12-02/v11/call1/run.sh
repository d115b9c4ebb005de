#!/bin/bash
# v11 call 1: the vector cross-entropy kernel (test + bench), the 8B 4-block proxy (restored d 128 backward + new CE),
# head chunk 2560 (default) vs 3328 tokens, one traced run for the per-range breakdown.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
T=.dev/bin/trainer
run() { local to=$1 name=$2; shift 2; timeout $to $T configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
timeout 60 .dev/bin/unit_tests "[cuda][cross_entropy]" > $R/unit_ce.log 2>&1; log "unit ce rc $?"
timeout 90 .dev/bin/unit_tests "[.cuda-bench]" > $R/bench.log 2>&1; log "bench rc $?"
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1"
run 150 b8_4blocks $B8 --set bench.warmup_steps=2 --set bench.measure_steps=5
run 150 b8_4blocks_c3328 $B8 --set bench.warmup_steps=2 --set bench.measure_steps=5 --set checkpointing.lm_head_chunk_tokens=3328
run 150 b8_4blocks_again $B8 --set bench.warmup_steps=2 --set bench.measure_steps=5
run 90 b8_4blocks_traced $B8 --set bench.warmup_steps=1 --set bench.measure_steps=2 --set profile.trace=$OUT/b8_trace.json
python3 -c "
import json; d=json.load(open('$R/b8_4blocks_traced.json')); print('b8 traced step', d['timing']['step']['mean_ms'])
for r in d['profile']['ranges'][:16]: print('%-30s %6.1f calls %9.2f ms/step %8.3f ms/call' % (r['name'], r['calls_per_step'], r['ms_per_step'], r['ms_per_step']/r['calls_per_step']))
" > $R/b8_traced_summary.txt 2>&1
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_ce.log | tail -2
grep cross_entropy $R/bench.log
cat $R/b8_traced_summary.txt
for f in $R/*.json; do python3 -c "
import json; d=json.load(open('$f'))
if 'timing' in d and 'step' in d['timing'] and 'mean_ms' in d['timing']['step']:
    m=d.get('memory',{}); bc=m.get('by_category',{})
    print('%-28s %-6s %9.1f ms (min %.1f) %7.2f GiB planned %7.2f head %.3f GiB' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], d['timing']['step'].get('min_ms',0), m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30, bc.get('head',0)/2**30 if isinstance(bc.get('head',0),(int,float)) else -1))
" 2>/dev/null; done
