#!/bin/bash
# v10 call 1: d 80 Hopper attention (flash bench check + timing vs mma.sync and SDPA), [cuda][flash] unit tests,
# xl bf16 steps at ctx 512 / 2048 / 8192 with the new kernels.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv > $R/gpu.txt
log "flash bench build"
JOBS=16 EXTRA_INC=.dev/inc bash launch/flash_bench/build.sh > $R/fb_build.log 2>&1 || log "flash build FAILED"
log "sm90_check"
timeout 220 python3 launch/flash_bench/sm90_check.py --fwd 0,10,20,21 --bwd 0,10,20,21 --xl --out $R > $R/sm90_check.log 2>&1; log "sm90_check rc $?"
log "unit flash"
timeout 150 .dev/bin/unit_tests "[cuda][flash]" > $R/unit_flash.log 2>&1; log "unit rc $?"
T=.dev/bin/trainer
run() { local name=$1; shift; timeout 120 $T configs/xl.json --set device=cuda --set precision=bf16 --set attention=flash2 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
run xl_c512_selective --set bench.warmup_steps=3 --set bench.measure_steps=10
run xl_c2048_none --set model.context_length=2048 --set checkpointing.policy=none --set bench.warmup_steps=2 --set bench.measure_steps=5
run xl_c2048_selective --set model.context_length=2048 --set checkpointing.policy=selective --set bench.warmup_steps=2 --set bench.measure_steps=5
run xl_c2048_full --set model.context_length=2048 --set checkpointing.policy=full --set bench.warmup_steps=2 --set bench.measure_steps=5
run xl_c8192_selective --set model.context_length=8192 --set checkpointing.policy=selective --set bench.warmup_steps=1 --set bench.measure_steps=3
log done
tar czf $OUT/r.tgz -C $OUT r
tail -30 $R/sm90_check.log
grep -h "passed\|failed\|assertions" $R/unit_flash.log | tail -3
for f in $R/xl_*.json; do python3 -c "
import json; d=json.load(open('$f')); m=d.get('memory',{})
print('%-22s %-6s %9.1f ms %7.2f GiB planned %7.2f' % ('$(basename $f .json)', d.get('status'), d['timing']['step']['mean_ms'], m.get('peak_bytes',0)/2**30, m.get('predicted',{}).get('peak_bytes',0)/2**30))"; done
