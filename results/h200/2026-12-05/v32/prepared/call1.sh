#!/bin/bash
# v32 one call: optimizer.in_gemm auto (on for cuda bf16, products of >= in_gemm_min_elements = 8388608 elements):
# every [cuda] test, then xl and small bf16 with in_gemm off / auto / every matrix (min 0), interleaved and repeated,
# beside the PyTorch peer in reduce-overhead (its fastest at these sizes on the H200, v24) in the same call; then, while
# time is left, xl ctx 2048 (auto) beside the peer. Carry .dev (trainer.xz, unit_tests.xz).
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
L=${LIMIT:-585}
step cuda_tests 200 .dev/bin/unit_tests "${TESTS:-[cuda]}"
OFF="--set optimizer.in_gemm=false"; EVERY="--set optimizer.in_gemm_min_elements=0"
train_step small_off configs/small.json $OFF
train_step small_auto configs/small.json
train_step small_off2 configs/small.json $OFF
train_step small_auto2 configs/small.json
train_step small_every configs/small.json $EVERY
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step xl_off configs/xl.json $OFF $X
train_step xl_auto configs/xl.json $X
train_step xl_every configs/xl.json $EVERY $X
train_step xl_auto2 configs/xl.json $X
train_step xl_off2 configs/xl.json $OFF $X
# the peer while time is left (with little device time, the trainer's own off / auto comparison comes first)
if [ $(left $L) -gt 130 ]; then peer_step torch_xl $(( $(left $L) - 5 )) --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead; fi
if [ $(left $L) -gt 70 ]; then peer_step torch_small $(( $(left $L) - 5 )) --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead; fi
if [ $(left $L) -gt 200 ]; then
  train_step xl2k_auto configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=5
  peer_step torch_xl2k $(( $(left $L) - 15 )) --preset xl --ctx 2048 --warmup 2 --steps 5 --compile-mode reduce-overhead
fi
{
tail -2 $R/cuda_tests.log
for f in $R/small*.json $R/torch_small.json $R/xl_*.json $R/torch_xl.json $R/xl2k*.json $R/torch_xl2k.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); o=r.get('config',{}).get('optimizer',{}); o=o if isinstance(o, dict) else {}; print(sys.argv[1].split('/')[-1], r.get('status'), \
t.get('median_ms'), t.get('mean_ms'), round((m.get('peak_bytes') or 0)/2**30, 3), \
round(((m.get('predicted') or {}).get('peak_bytes') or 0)/2**30, 3), o.get('in_gemm'), \
o.get('in_gemm_min_elements'), (r.get('loss') or {}).get('per_step', [None])[-1] if isinstance(r.get('loss'), dict) else '')" $f
done
} > $R/summary.log 2>&1
finish
