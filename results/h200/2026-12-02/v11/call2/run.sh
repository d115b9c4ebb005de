#!/bin/bash
# v11 call 3: the cluster cross-entropy kernel (test + bench) and the 8B 4-block proxy (policies none / selective,
# head chunks 2560 / 3328 / whole); fp32_matmul 3xtf32 (unit test; xl fp32 step ieee vs 3xtf32 vs PyTorch fp32
# eager); memcheck / racecheck of the new kernel, memcheck of the Hopper attention tests.
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
timeout 90 .dev/bin/unit_tests "[cuda][cross_entropy],[cuda][matmul]" > $R/unit.log 2>&1; log "unit rc $?"
timeout 90 .dev/bin/unit_tests "[.cuda-bench]" > $R/bench.log 2>&1; log "bench rc $?"
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=2 --set bench.measure_steps=5"
run 150 b8_none $B8 --set checkpointing.policy=none
run 150 b8_none_c3328 $B8 --set checkpointing.policy=none --set checkpointing.lm_head_chunk_tokens=3328
run 150 b8_none_whole $B8 --set checkpointing.policy=none --set checkpointing.lm_head_chunk_tokens=32768
run 150 b8_selective $B8
run 150 b8_none_again $B8 --set checkpointing.policy=none
tar czf $OUT/r.tgz -C $OUT r
F32="--set precision=fp32 --set bench.warmup_steps=2 --set bench.measure_steps=5"
run 120 xl_fp32_3xtf32 $F32 --set fp32_matmul=3xtf32
run 120 xl_fp32_ieee $F32
log "torch xl fp32 eager"
timeout 150 python3 launch/torch_bench.py --preset xl --mode fp32 --ctx 512 --warmup 2 --steps 5 --json $R/torch_xl_fp32.json > $R/torch_xl_fp32.log 2>&1; log "torch rc $?"
run 120 xl_fp32_3xtf32_again $F32 --set fp32_matmul=3xtf32
tar czf $OUT/r.tgz -C $OUT r
timeout 60 compute-sanitizer --tool memcheck .dev/bin/unit_tests "[cuda][cross_entropy]" > $R/memcheck_ce.log 2>&1; log "memcheck ce rc $?"
timeout 60 compute-sanitizer --tool racecheck .dev/bin/unit_tests "[cuda][cross_entropy]" > $R/racecheck_ce.log 2>&1; log "racecheck ce rc $?"
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 40 ]; then timeout $left compute-sanitizer --tool memcheck .dev/bin/unit_tests "[cuda][flash][sm90]" > $R/memcheck_sm90.log 2>&1; log "memcheck sm90 rc $?"; fi
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit.log | tail -2
grep -h "fp32_matmul\|cross_entropy" $R/unit.log | head -12
grep cross_entropy $R/bench.log
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|Race reported\|passed\|failed" $R/memcheck_ce.log $R/racecheck_ce.log $R/memcheck_sm90.log 2>/dev/null
grep -v "^\s*$" $R/torch_xl_fp32.log | tail -3
for f in $R/*.json; do python3 -c "
import json; d=json.load(open('$f'))
if 'timing' in d and 'step' in d['timing'] and 'mean_ms' in d['timing']['step']:
    m=d.get('memory',{}); bc=m.get('by_category',{}); pr=d.get('plan',{}) or {}
    print('%-24s %-4s %8.1f ms (min %.1f) %7.2f GiB planned %7.2f head %.3f loss %s' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], d['timing']['step'].get('min_ms',0), m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30, bc.get('head',0)/2**30, (d.get('loss') or {}).get('per_step','')[:3]))
" 2>/dev/null; done
