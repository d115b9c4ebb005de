#!/bin/bash
# What the H100 sessions (v31, v32) left unmeasured beside the peer: xl bf16 at context 2048 (issue 19's bar: <= 0.8x),
# the peer's compile default at xl (v24 found reduce-overhead fastest at xl on the H200, not yet on the H100), and the
# peer's three modes at small (--compile-mode best). The trainer's defaults (in_gemm auto). Either card; records under
# results/<card>/. Carry .dev/trainer.xz (xz -T2 -c build-cuda/trainer > .dev/trainer.xz). LIMIT: seconds (585).
source launch/device_call.sh "$0"
unpack_bins trainer
L=${LIMIT:-585}
train_step xl2k configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=5
peer_step torch_xl2k 200 --preset xl --ctx 2048 --warmup 2 --steps 5 --compile-mode reduce-overhead
train_step xl configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
if [ $(left $L) -gt 150 ]; then
  peer_step torch_xl_default 140 --preset xl --warmup 3 --steps 10 --compile-mode default
fi
if [ $(left $L) -gt 120 ]; then
  train_step small configs/small.json
  peer_step torch_small_best $(( $(left $L) - 10 )) --preset small --warmup 5 --steps 30 --compile-mode best
fi
{
for f in $R/xl2k.json $R/torch_xl2k.json $R/xl.json $R/torch_xl_default.json $R/small.json $R/torch_small_best.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); c=r.get('config',{}); print(sys.argv[1].split('/')[-1], r.get('status'), \
t.get('median_ms'), t.get('mean_ms'), round((m.get('peak_bytes') or 0)/2**30, 3), \
round(((m.get('predicted') or {}).get('peak_bytes') or 0)/2**30, 3), c.get('compile_mode', ''), \
r.get('compile_mode_chosen', ''), r.get('compile_modes', ''))" $f
done
} > $R/summary.log 2>&1
save
cat $R/summary.log
cat $R/progress.log
