#!/bin/bash
# v36 call 1 (about 7 minutes): (a) the product alone on cooperative tiles (DWA_COOP 1: 128 x 256, each consumer
# m64n256; 2: 256 x 128, each consumer 2 x m64n128) against production's ping-pong 128 x 128 and cuBLASLt, xl's four
# weights at 4 x 512 tokens, after the float64 checks of each build's product; (b) issue 19's lean bars: small and xl
# beside the peer's reduce-overhead, the 16-head attention shapes beside SDPA. Carry .dev: trainer.xz, flash.tar.xz,
# dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
B="python3 launch/dw_adamw_bench/check.py"
T="--no-check --shapes xl --variants gemm_ours,gemm_cublaslt --rounds 11"
step coop1_check 60 $B --lib dwa/libdwa_coop1.so --quick --no-time --out $R/coop1_check
step coop2_check 60 $B --lib dwa/libdwa_coop2.so --quick --no-time --out $R/coop2_check
step t_prod 60 $B --lib dwa/libdwa.so $T --out $R/t_prod
step t_coop1 60 $B --lib dwa/libdwa_coop1.so $T --out $R/t_coop1
step t_coop2 60 $B --lib dwa/libdwa_coop2.so $T --out $R/t_coop2
step t_prod2 60 $B --lib dwa/libdwa.so $T --out $R/t_prod2
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
peer_step torch_xl 170 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
step attention 60 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
{
cat $R/gpu.log
for n in coop1_check coop2_check; do echo "$n:"; grep -E "^check|failures" $R/$n.log | cut -c1-150; done
for n in t_prod t_coop1 t_coop2 t_prod2; do echo "$n:"; tail -6 $R/$n.log; done
for f in $R/small.json $R/torch_small.json $R/xl.json $R/torch_xl.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3))" $f
done
echo "attention --short:"; tail -8 $R/attention.log
} > $R/summary.log 2>&1
finish
