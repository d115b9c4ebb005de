#!/bin/bash
# v13 call 1: AdamW of optimizer.in_backward on a side stream over optimizer.side_sms SMs, the backward's GEMMs planned
# for the rest (cuBLASLt SM count target). Exactness tests, then small and xl bf16 with side_sms 0 / 8 / 16 / 24 / 32.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
T=.dev/bin/trainer
timeout 150 .dev/bin/unit_tests "[side],[cuda][adamw]" > $R/unit_side.log 2>&1; log "unit side rc $?"
run() { local to=$1 cfg=$2 name=$3; shift 3; timeout $to $T $cfg --set device=cuda --set precision=bf16 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
run 60 configs/small.json small_plain $S
run 60 configs/small.json small_ib0 $S --set optimizer.in_backward=true
run 60 configs/small.json small_ib8 $S --set optimizer.in_backward=true --set optimizer.side_sms=8
run 60 configs/small.json small_ib16 $S --set optimizer.in_backward=true --set optimizer.side_sms=16
X="--set bench.warmup_steps=3 --set bench.measure_steps=15"
run 120 configs/xl.json xl_plain $X
run 120 configs/xl.json xl_ib0 $X --set optimizer.in_backward=true
for k in 16 8 24 32; do run 120 configs/xl.json xl_ib$k $X --set optimizer.in_backward=true --set optimizer.side_sms=$k; done
run 120 configs/xl.json xl_ib0_again $X --set optimizer.in_backward=true
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_side.log | tail -3
python3 - <<'PY'
import json,os,glob
R=os.environ['OUT']+'/r'
for f in sorted(glob.glob(R+'/*.json')):
    d=json.load(open(f)); n=os.path.basename(f)[:-5]
    st=d['timing']['step']; g=d.get('cuda_graph',{})
    l=d['loss']['per_step']
    print('%-14s %8.3f ms peak %6.2f GiB graph %s loss[-1] %r' % (n, st.get('mean_ms',0), d['memory']['peak_bytes']/2**30, g.get('used'), l[-1]))
PY
