#!/bin/bash
# v36 call 2 (about 9 minutes): the rest of issue 19's list beside its peers: xl with in_gemm off beside auto, d 80
# at the xl shapes beside SDPA (--xl), xl fp32 (fp32_matmul 3xtf32) beside the peer's fp32 eager step, then
# racecheck of the fused dW + AdamW kernel alone (--kernel-name: v35 showed the hazards it reports are in cuBLASLt's
# own kernels) with what time is left. Carry .dev: trainer.xz, flash.tar.xz, dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz .dev/dwa.tar.xz
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step xl configs/xl.json $X
train_step xl_off configs/xl.json --set optimizer.in_gemm=false $X
step attention_xl 90 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --xl --no-check --out $R/xlshapes
F32="--set precision=fp32 --set fp32_matmul=3xtf32 --set bench.warmup_steps=2 --set bench.measure_steps=5"
[ $(left $L) -gt 200 ] && train_step xl_fp32 configs/xl.json $F32
[ $(left $L) -gt 130 ] && peer_step torch_xl_fp32 120 --preset xl --warmup 2 --steps 5 --mode fp32
[ $(left $L) -gt 60 ] && step race_dwa $(( $(left $L) - 15 )) compute-sanitizer --tool racecheck --kernel-name kns=dw_adamw \
  --print-limit 20 python3 launch/dw_adamw_bench/check.py --lib dwa/libdwa.so --quick --no-time --out $R/race
{
cat $R/gpu.log
for f in $R/xl.json $R/xl_off.json $R/xl_fp32.json $R/torch_xl_fp32.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3))" $f
done
echo "attention --xl:"; tail -14 $R/attention_xl.log 2>/dev/null
echo "racecheck:"; grep -E "RACECHECK SUMMARY|failures|Error" $R/race_dwa.log 2>/dev/null | sort | uniq -c | head
} > $R/summary.log 2>&1
finish
