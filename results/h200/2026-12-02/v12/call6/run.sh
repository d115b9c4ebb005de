#!/bin/bash
# v12 call 6, after the review's fixes (cache given back before the capture, workspaces pinned while a graph exists,
# no phase split in a run with a graph, nvtx off the graph): the graph tests, every [cuda] test, small and xl again.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
T=.dev/bin/trainer
timeout 120 .dev/bin/unit_tests "[graph]" > $R/unit_graph.log 2>&1; log "unit graph rc $?"
run() { local to=$1 cfg=$2 name=$3; shift 3; timeout $to $T $cfg --set device=cuda --set precision=bf16 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
run 60 configs/small.json small_eager $S --set cuda_graph=false
run 60 configs/small.json small_graph $S --set cuda_graph=true
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
run 120 configs/xl.json xl_graph $X --set cuda_graph=true
timeout 240 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit cuda rc $?"
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_graph.log $R/unit_cuda.log | tail -4
python3 - <<'PY'
import json,os,glob
R=os.environ['OUT']+'/r'
for f in sorted(glob.glob(R+'/*.json')):
    d=json.load(open(f)); n=os.path.basename(f)[:-5]
    st=d['timing']['step']; g=d.get('cuda_graph',{})
    print('%-12s %8.3f ms peak %6.2f GiB reserved %6.2f GiB graph %s' % (n, st.get('mean_ms',0), d['memory']['peak_bytes']/2**30, (d['memory'].get('reserved_peak_bytes') or 0)/2**30, json.dumps(g)[:160]))
PY
