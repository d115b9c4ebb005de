#!/bin/bash
# v13 call 2: adamw_one with every operation rounded as written (the narrow kernel had contracted differently);
# the side tests again; traced xl steps (no graph) with side_sms 0 / 16 / 32 to see the GEMMs and the updates.
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
X="--set bench.warmup_steps=2 --set bench.measure_steps=2 --set optimizer.in_backward=true"
for k in 0 16 32; do run 120 configs/xl.json xl_trace$k $X --set optimizer.side_sms=$k --set profile.trace=$R/xl_trace$k.trace.json; done
log done
python3 - <<'PY' > $R/summary.txt
import json,os,collections
R=os.environ['OUT']+'/r'
for k in (0,16,32):
    f=R+'/xl_trace%d.trace.json'%k
    if not os.path.exists(f): print(k,'missing'); continue
    d=json.load(open(f)); ev=d['traceEvents'] if isinstance(d,dict) else d
    ops=[e for e in ev if e.get('ph')=='X' and e.get('cat')=='op']
    tot=collections.defaultdict(float); cnt=collections.Counter()
    for e in ev:
        if e.get('ph')!='X' or e.get('cat') not in ('op','phase'): continue
        key=e['cat']+':'+e['name']; tot[key]+=e['dur']; cnt[key]+=1
    print('side_sms',k, json.dumps(json.load(open(R+'/xl_trace%d.json'%k))['timing']['step']))
    for n,t in sorted(tot.items(), key=lambda x:-x[1])[:12]: print('   %-28s %9.2f ms  n=%d' % (n,t/1e3/2,cnt[n]//2))
    ad=[e for e in ops if e['name']=='adamw']
    if ad: print('   adamw per call (ms):', sorted(round(e['dur']/1e3,3) for e in ad)[len(ad)//2], 'max', round(max(e['dur'] for e in ad)/1e3,3))
PY
cat $R/summary.txt
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_side.log | tail -3
