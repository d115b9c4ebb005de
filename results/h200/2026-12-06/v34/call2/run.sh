#!/bin/bash
# Issue 19's bars in one call on an H200 (ask for kind nvidia-h200; if the reply's device is an H100, the numbers
# are that card's, side by side as ever, and record under results/h100): the trainer's defaults (in_gemm auto) beside
# the PyTorch peer in reduce-overhead (its fastest at these sizes on the H200, v24), most needed first:
# small, xl ctx 512 (auto and off), the two 16-head attention shapes beside SDPA in the same process
# (launch/flash_bench/bench.py --short), then while time is left xl ctx 2048 beside the peer and the peer's
# three modes at small (--compile-mode best). The [cuda] tests run in call1.sh (TESTS=[cuda]).
# Carry .dev: trainer.xz (xz -T2 -c build-cuda/trainer > .dev/trainer.xz) and flash.tar.xz
# (launch/flash_bench/build.sh, then tar cJf .dev/flash.tar.xz -C .carry flash).
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
L=${LIMIT:-585}
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 150 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
train_step xl_off configs/xl.json --set optimizer.in_gemm=false $X
peer_step torch_xl 200 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
train_step xl2 configs/xl.json $X
step attention 120 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R
if [ $(left $L) -gt 200 ]; then
  train_step xl2k configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=5
  peer_step torch_xl2k $(( $(left $L) - 20 )) --preset xl --ctx 2048 --warmup 2 --steps 5 --compile-mode reduce-overhead
fi
if [ $(left $L) -gt 200 ]; then
  peer_step torch_small_best $(( $(left $L) - 10 )) --preset small --warmup 5 --steps 30 --compile-mode best
fi
{
for f in $R/small.json $R/torch_small.json $R/xl.json $R/xl2.json $R/xl_off.json $R/torch_xl.json $R/xl2k.json \
    $R/torch_xl2k.json $R/torch_small_best.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); c=r.get('config',{}); print(sys.argv[1].split('/')[-1], r.get('status'), str(r.get('backend', ''))[:24], \
t.get('median_ms'), t.get('mean_ms'), round((m.get('peak_bytes') or 0)/2**30, 3), c.get('compile_mode', ''), \
r.get('compile_mode_chosen', ''))" $f
done
tail -8 $R/attention.log
} > $R/summary.log 2>&1
finish
