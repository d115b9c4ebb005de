#!/bin/bash
# v10 call 3: the PyTorch peer at its best compile mode (default, reduce-overhead, max-autotune-no-cudagraphs) at xl
# ctx 8192 with per-block checkpointing, then max-autotune-no-cudagraphs at ctx 16384.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin; gunzip -c .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/trainer
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=1 --set bench.measure_steps=2"
timeout 90 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 $B8 --set name=b8_4blocks_traced --set output.results=$R/b8_4blocks_traced.json --set profile.trace=$OUT/b8_trace.json > $R/b8_4blocks_traced.log 2>&1; log "b8 traced rc $?"
python3 -c "
import json; d=json.load(open('$R/b8_4blocks_traced.json')); print('b8 traced step', d['timing']['step']['mean_ms'])
for r in d['profile']['ranges'][:14]: print('%-30s %6.1f calls %9.2f ms/step %8.3f ms/call' % (r['name'], r['calls_per_step'], r['ms_per_step'], r['ms_per_step']/r['calls_per_step']))
" > $R/b8_traced_summary.txt 2>&1
cat $R/b8_traced_summary.txt
log "torch xl 8192 best"
timeout 330 python3 launch/torch_bench.py --preset xl --mode compiled --compile-mode best --timeout 150 --ctx 8192 --checkpoint block --warmup 1 --steps 2 --json $R/torch_xl_c8192_best.json > $R/torch_xl_c8192_best.log 2>&1; log "rc $?"
tar czf $OUT/r.tgz -C $OUT r
left=$(( 540 - ($(date +%s) - t0) ))
log "torch xl 16384 max-autotune-no-cudagraphs (timeout $left)"
if [ $left -gt 60 ]; then
timeout $left python3 launch/torch_bench.py --preset xl --mode compiled --compile-mode max-autotune-no-cudagraphs --ctx 16384 --checkpoint block --warmup 1 --steps 2 --json $R/torch_xl_c16384_mat.json > $R/torch_xl_c16384_mat.log 2>&1; log "rc $?"
fi
tar czf $OUT/r.tgz -C $OUT r
grep -v "^\s*$" $R/torch_xl_c8192_best.log | tail -8
tail -3 $R/torch_xl_c16384_mat.log
