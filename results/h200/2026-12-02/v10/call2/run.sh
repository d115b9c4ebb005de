#!/bin/bash
# v10 call 2: side-stream AdamW (in_backward) exactness and speed; xl ctx 16384 with the d 80 Hopper kernels; the 8B
# 4-block proxy; the PyTorch peer at xl ctx 16384 (compiled default, per-block checkpointing).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
T=.dev/bin/trainer
run() { local to=$1 name=$2; shift 2; timeout $to $T configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
# exactness of the side-stream updates: small, naive attention (deterministic), 4 steps, with and without in_backward
run 90 small_naive_base --set model.preset=small --set attention=naive --set bench.warmup_steps=0 --set bench.measure_steps=4
run 90 small_naive_inbwd --set model.preset=small --set attention=naive --set bench.warmup_steps=0 --set bench.measure_steps=4 --set optimizer.in_backward=true
run 120 xl_c512_base --set bench.warmup_steps=3 --set bench.measure_steps=10
run 120 xl_c512_inbwd --set bench.warmup_steps=3 --set bench.measure_steps=10 --set optimizer.in_backward=true
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=2 --set bench.measure_steps=5"
run 150 b8_4blocks_selective $B8
run 150 b8_4blocks_sel_inbwd $B8 --set optimizer.in_backward=true
BL="[$(seq -s, 0 20)]"
run 150 xl_c16384_full21_keepattn --set model.context_length=16384 --set checkpointing.policy=full --set "checkpointing.blocks=$BL" --set checkpointing.keep_attention=true --set bench.warmup_steps=1 --set bench.measure_steps=2
log "torch xl 16384"
timeout 240 python3 launch/torch_bench.py --preset xl --mode compiled --ctx 16384 --checkpoint block --warmup 1 --steps 2 --json $R/torch_xl_c16384_compiled_ckpt.json > $R/torch_xl_c16384.log 2>&1; log "torch rc $?"
timeout 60 .dev/bin/unit_tests "[cuda][flash][sm90]" > $R/unit_sm90.log 2>&1; log "unit rc $?"
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_sm90.log | tail -2
tail -3 $R/torch_xl_c16384.log
for f in $R/*.json; do python3 -c "
import json; d=json.load(open('$f'))
if 'timing' in d and 'step' in d['timing'] and 'mean_ms' in d['timing']['step']:
    m=d.get('memory',{}); l=d.get('losses') or d.get('loss') or ''
    print('%-28s %-6s %9.1f ms %7.2f GiB planned %7.2f' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30))
" 2>/dev/null; done
python3 - <<'PY'
import json,os
R=os.environ['OUT']+'/r'
def get(n):
    d=json.load(open(f'{R}/{n}.json')); return d['loss']['per_step'], d['grad_norm']['per_step']
for a,b in (('small_naive_base','small_naive_inbwd'),('xl_c512_base','xl_c512_inbwd'),('b8_4blocks_selective','b8_4blocks_sel_inbwd')):
    try:
        la,ga=get(a); lb,gb=get(b)
        print(a,'vs',b,'losses equal:',la==lb,'grad norms max rel diff: %.2e' % max(abs(x-y)/abs(x) for x,y in zip(ga,gb)), 'loss max abs diff: %.2e' % max(abs(x-y) for x,y in zip(la,lb)))
    except Exception as e: print('loss read', a, b, e)
PY
