#!/bin/bash
# Session 34, call 3 (the same warm H200 as call2): xl bf16 ctx 2048 (in_gemm auto) beside the peer's reduce-overhead.
source launch/device_call.sh "$0"
unpack_bins trainer
L=${LIMIT:-270}
train_step xl2k configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=5
peer_step torch_xl2k $(( $(left $L) - 5 )) --preset xl --ctx 2048 --warmup 2 --steps 5 --compile-mode reduce-overhead
for f in $R/xl2k.json $R/torch_xl2k.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), r.get('compile_mode_chosen', ''))" $f
done > $R/summary.log 2>&1
finish
