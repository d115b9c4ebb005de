#!/bin/bash
# v12 call 2: the graph test (fixed data source), a traced small step (where its 5.3 ms go), compute-sanitizer memcheck
# of the graph test and racecheck of the Hopper attention kernels (d 64, 80, 128).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
T=.dev/bin/trainer
timeout 120 .dev/bin/unit_tests "[cuda][model][graph]" > $R/unit_graph.log 2>&1; log "unit graph rc $?"
timeout 60 $T configs/small.json --set device=cuda --set precision=bf16 --set name=small_trace --set bench.warmup_steps=3 --set bench.measure_steps=3 --set profile.trace=$R/small_trace.trace.json --set output.results=$R/small_trace.json > $R/small_trace.log 2>&1; log "trace rc $?"
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 .dev/bin/unit_tests "[cuda][model][graph]" > $R/memcheck_graph.log 2>&1; log "memcheck graph rc $?"
timeout 280 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 20 .dev/bin/unit_tests "[cuda][flash][sm90]" > $R/racecheck_sm90.log 2>&1; log "racecheck sm90 rc $?"
log done
gzip -f $R/small_trace.trace.json
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed\|ERROR SUMMARY\|RACECHECK SUMMARY\|hazard" $R/unit_graph.log $R/memcheck_graph.log $R/racecheck_sm90.log | tail -12
python3 - <<'PY'
import json,os
R=os.environ['OUT']+'/r'
d=json.load(open(R+'/small_trace.json'))
p=d.get('profile',{})
print(json.dumps(p)[:3000])
PY
