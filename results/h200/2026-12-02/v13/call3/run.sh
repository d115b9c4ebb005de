#!/bin/bash
# v13 call 3 (experiment build: env toggles, not committed code): why the backward's GEMMs ran 40-60% slower beside
# the side-stream update. Traced xl steps, side_sms 16: as in call 2; GEMMs not planned for fewer SMs (NOTARGET);
# GEMMs planned for 116 SMs but the update on the compute stream (NOSIDE); streaming loads / stores (CS); CS at 32.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/trainer.gz > .dev/bin/trainer; chmod +x .dev/bin/*
T=.dev/bin/trainer
run() { local to=$1 cfg=$2 name=$3; shift 3; timeout $to $T $cfg --set device=cuda --set precision=bf16 --set name=$name --set output.results=$R/$name.json "$@" > $R/$name.log 2>&1; log "$name rc $?"; }
X="--set bench.warmup_steps=2 --set bench.measure_steps=2 --set optimizer.in_backward=true"
tr() { local n=$1; shift; run 120 configs/xl.json $n $X --set profile.trace=$R/$n.trace.json "$@"; }
tr s16 --set optimizer.side_sms=16
TRAINER_X_NOTARGET=1 tr s16_notarget --set optimizer.side_sms=16
TRAINER_X_NOSIDE=1 tr s16_noside --set optimizer.side_sms=16
TRAINER_X_CS=1 tr s16_cs --set optimizer.side_sms=16
TRAINER_X_CS=1 tr s32_cs --set optimizer.side_sms=32
TRAINER_X_CS=1 TRAINER_X_NOTARGET=1 tr s32_cs_notarget --set optimizer.side_sms=32
log done
python3 - <<'PY' > $R/summary.txt
import json,os,collections,glob
R=os.environ['OUT']+'/r'
for f in sorted(glob.glob(R+'/*.trace.json')):
    n=os.path.basename(f)[:-11]
    d=json.load(open(f)); ev=d['traceEvents'] if isinstance(d,dict) else d
    tot=collections.defaultdict(float)
    for e in ev:
        if e.get('ph')=='X' and e.get('cat')=='op': tot[e['name']]+=e['dur']/2e3
    ad=sorted(e['dur']/1e3 for e in ev if e.get('ph')=='X' and e.get('name')=='adamw')
    st=json.load(open(R+'/'+n+'.json'))['timing']['step']['mean_ms']
    print('%-18s step %7.2f  matmul %6.2f  adamw %6.2f (median call %.3f)  rmsnorm_bwd %.2f swiglu_bwd %.2f' % (n, st, tot['matmul'], tot['adamw'], ad[len(ad)//2] if ad else 0, tot['rmsnorm_bwd'], tot['swiglu_bwd']))
PY
cat $R/summary.txt
tar czf $OUT/r.tgz -C $OUT r
