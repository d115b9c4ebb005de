#!/bin/bash
# v12 call 3 (final binary): the graph tests (replay = uncaptured, clipping on the device, device-read AdamW values),
# every [cuda] test, memcheck of the graph tests; small bf16 uncaptured vs graph (with and without clipping) next to
# torch.compile reduce-overhead; xl ctx 512 uncaptured vs graph.
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
for i in 1 2; do
  run 60 configs/small.json small_eager_$i $S --set cuda_graph=false
  run 60 configs/small.json small_graph_$i $S --set cuda_graph=true
done
run 60 configs/small.json small_clip_eager $S --set cuda_graph=false --set optimizer.max_grad_norm=1.0
run 60 configs/small.json small_clip_graph $S --set cuda_graph=true --set optimizer.max_grad_norm=1.0
log "torch small reduce-overhead"
timeout 200 python3 launch/torch_bench.py --preset small --mode compiled --compile-mode reduce-overhead --warmup 5 --steps 30 --json $R/torch_small_ro.json > $R/torch_small_ro.log 2>&1; log "torch rc $?"
run 60 configs/small.json small_graph_3 $S --set cuda_graph=true
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
run 120 configs/xl.json xl_eager $X --set cuda_graph=false
run 120 configs/xl.json xl_graph $X --set cuda_graph=true
timeout 150 compute-sanitizer --tool memcheck --print-limit 20 .dev/bin/unit_tests "[graph]" > $R/memcheck_graph.log 2>&1; log "memcheck graph rc $?"
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit cuda rc $?"
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed\|ERROR SUMMARY" $R/unit_graph.log $R/memcheck_graph.log $R/unit_cuda.log | tail -8
tail -1 $R/torch_small_ro.log
python3 - <<'PY'
import json,os,glob
R=os.environ['OUT']+'/r'
res={}
for f in sorted(glob.glob(R+'/*.json')):
    try:
        d=json.load(open(f))
        if 'timing' not in d: continue
        n=os.path.basename(f)[:-5]; res[n]=d
        st=d['timing']['step']; g=d.get('cuda_graph',{})
        print('%-18s %8.3f ms (median %8.3f) peak %6.2f GiB graph %s %s' % (n, st.get('mean_ms',0), st.get('median_ms',0), d['memory']['peak_bytes']/2**30, g.get('used'), g.get('nodes','')))
    except Exception as e: print(f, e)
for a,b in (('small_eager_1','small_graph_1'),('small_clip_eager','small_clip_graph'),('xl_eager','xl_graph')):
    if a in res and b in res:
        print(a,b,'losses equal', res[a]['loss']['per_step']==res[b]['loss']['per_step'], 'gnorms equal', res[a]['grad_norm']['per_step']==res[b]['grad_norm']['per_step'])
PY
