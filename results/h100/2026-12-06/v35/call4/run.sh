#!/bin/bash
# v35 lean call (about 4.5 minutes, for a budget near its end): the trainer's defaults beside the PyTorch peer's
# reduce-overhead at small and xl ctx 512, and the two 16-head attention shapes beside SDPA. Carry .dev: trainer.xz,
# flash.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
peer_step torch_xl 170 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
step attention 60 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
{
cat $R/gpu.log
for f in $R/small.json $R/torch_small.json $R/xl.json $R/torch_xl.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3))" $f
done
echo "attention --short:"; tail -8 $R/attention.log
} > $R/summary.log 2>&1
finish
