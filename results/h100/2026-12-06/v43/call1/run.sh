#!/bin/bash
# v43 call1 on a GPU other than an H200 (~2 min): v42's call2, which also prints each record's timing.predicted (the
# 2-rank records: the rank's planned comm_ms and comm_exposed_ms, new in v43). v42's text: (1) small bf16 beside
# nothing: the record's new
# timing.predicted (the planner's step time at this GPU's rates) beside timing.step. (2) two ranks on the one GPU with
# comm mpi (NCCL cannot put two ranks on one GPU), tiny on cuda, zero1, a checkpoint whose weights write rank 0 holds
# 5 s longer (TRAINER_TEST_IO_PAUSE_S) past comm_timeout_s 3: ok (parallel.checkpoint_timeout_s), then a resume with
# the last rank's read held 5 s: ok; then checkpoint_timeout_s 3 with a 7 s hold: the job ends naming the key.
# Carry .dev: trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
train_step small configs/small.json --set bench.warmup_steps=3 --set bench.measure_steps=20
M="mpirun --allow-run-as-root --oversubscribe -np 2"
T="configs/tiny.json --set device=cuda --set parallel.strategy=zero1 --set parallel.comm=mpi --set bench.warmup_steps=0"
rm -rf /tmp/ck
TRAINER_TEST_IO_PAUSE_S=5 step w2 120 $M .dev/bin/trainer $T --set bench.measure_steps=2 --set parallel.comm_timeout_s=3 \
  --set output.checkpoint=/tmp/ck --set output.results=$R/w2.json
TRAINER_TEST_IO_PAUSE_S=5 step r2 120 $M .dev/bin/trainer $T --set bench.measure_steps=4 --set parallel.comm_timeout_s=3 \
  --set init.resume=/tmp/ck --set output.results=$R/r2.json
TRAINER_TEST_IO_PAUSE_S=7 step t2 120 $M .dev/bin/trainer $T --set bench.measure_steps=2 --set parallel.comm_timeout_s=3 \
  --set parallel.checkpoint_timeout_s=3 --set output.checkpoint=/tmp/ck2 --set output.results=$R/t2.json
rm -rf /tmp/ck /tmp/ck2
{
cat $R/gpu.log
python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); t = r['timing']
print('small', r['status'], 'step median', t['step'].get('median_ms'), 'mean', t['step'].get('mean_ms'), 'predicted', t.get('predicted'))
for n in sys.argv[2:]:
    try:
        r = json.load(open(n))
    except Exception as e:
        print(n.split('/')[-1], 'no record', e); continue
    c = r.get('checkpoint') or {}
    print(n.split('/')[-1], r['status'], (r.get('timing') or {}).get('predicted'), (r.get('error') or '')[:200], 'writes', [(w['step'], round(w['write_s'], 2)) for w in c.get('writes', [])],
          'resumed', (c.get('resumed_from') or {}).get('step'))
" $R/small.json $R/w2.json $R/r2.json $R/t2.json
grep -h "checkpoint_timeout_s" $R/t2.log | cut -c1-240 | head -3
} > $R/summary.log 2>&1
finish
