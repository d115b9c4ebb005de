#!/bin/bash
# v12 call 1: CUDA graphs of the train step. Correctness first (the graph-vs-uncaptured test, the cross-entropy special
# values test never run on a GPU), then small bf16 uncaptured vs graph (alternating), xl ctx 512, the PyTorch peer
# (small, best of its compile modes), and every [cuda] test.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
T=.dev/bin/trainer
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > $R/gpu.txt 2>&1
timeout 120 .dev/bin/unit_tests "[cuda][model][graph]" > $R/unit_graph.log 2>&1; log "unit graph rc $?"
timeout 60 .dev/bin/unit_tests "[cuda][cross_entropy]" > $R/unit_ce.log 2>&1; log "unit ce rc $?"
run() { local to=$1 cfg=$2 name=$3; shift 3; timeout $to $T $cfg --set device=cuda --set precision=bf16 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
for i in 1 2; do
  run 60 configs/small.json small_eager_$i $S --set cuda_graph=false
  run 60 configs/small.json small_graph_$i $S --set cuda_graph=true
done
run 60 configs/small.json small_inbwd_eager $S --set cuda_graph=false --set optimizer.in_backward=true
run 60 configs/small.json small_inbwd_graph $S --set cuda_graph=true --set optimizer.in_backward=true
X="--set bench.warmup_steps=3 --set bench.measure_steps=10 --set optimizer.in_backward=true"
run 120 configs/xl.json xl_inbwd_eager $X --set cuda_graph=false
run 120 configs/xl.json xl_inbwd_graph $X --set cuda_graph=true
log "torch small best"
timeout 330 python3 launch/torch_bench.py --preset small --mode compiled --compile-mode best --warmup 5 --steps 30 --json $R/torch_small_best.json > $R/torch_small.log 2>&1; log "torch rc $?"
run 60 configs/small.json small_graph_3 $S --set cuda_graph=true
timeout 240 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit cuda rc $?"
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_*.log | tail -8
tail -2 $R/torch_small.log
python3 - <<'PY'
import json,os,glob
R=os.environ['OUT']+'/r'
for f in sorted(glob.glob(R+'/*.json')):
    try:
        d=json.load(open(f))
        if 'timing' not in d: 
            if 'step_ms' in str(d)[:5000]: print(os.path.basename(f), str(d)[:300])
            continue
        st=d['timing']['step']; g=d.get('cuda_graph',{})
        print('%-22s %8.3f ms (median %8.3f) peak %6.2f GiB graph %s %s' % (os.path.basename(f)[:-5], st.get('mean_ms',0), st.get('median_ms',0), d['memory']['peak_bytes']/2**30, g.get('used'), g.get('nodes','')))
    except Exception as e: print(f, e)
PY
