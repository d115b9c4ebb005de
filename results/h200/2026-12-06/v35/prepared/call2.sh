#!/bin/bash
# v35 call 2: issue 19's bars side by side with the PyTorch peer (reduce-overhead: its fastest at small and xl ctx 512
# on the H200 in v19 / v24) on whatever Hopper card comes (record under results/h100 or h200), most needed first:
# small, xl ctx 512 (in_gemm auto, off, auto), the 16-head attention shapes beside SDPA (--short), d 80 at the xl
# shapes beside SDPA (--xl); then, while time is left, xl fp32 (fp32_matmul 3xtf32) beside the peer's fp32 eager
# step, and racecheck of the fused dW + AdamW kernel alone (--kernel-name: v35 call 3 showed racecheck's hazards
# in cuBLASLt's own kernels, which the bench also runs). Carry .dev: trainer.xz, flash.tar.xz, dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz .dev/dwa.tar.xz
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 150 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
train_step xl_off configs/xl.json --set optimizer.in_gemm=false $X
peer_step torch_xl 200 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
train_step xl2 configs/xl.json $X
step attention 120 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
[ $(left $L) -gt 100 ] && step attention_xl 90 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --xl \
  --no-check --out $R/xlshapes
F32="--set precision=fp32 --set fp32_matmul=3xtf32 --set bench.warmup_steps=2 --set bench.measure_steps=5"
[ $(left $L) -gt 150 ] && train_step xl_fp32 configs/xl.json $F32
[ $(left $L) -gt 110 ] && peer_step torch_xl_fp32 100 --preset xl --warmup 2 --steps 5 --mode fp32 --compile-mode default
# (--mode fp32 after --mode compiled: argparse keeps the last, eager fp32)
[ $(left $L) -gt 60 ] && step race_dwa $(( $(left $L) - 15 )) compute-sanitizer --tool racecheck --kernel-name kns=dw_adamw \
  --print-limit 20 python3 launch/dw_adamw_bench/check.py --lib dwa/libdwa.so --quick --no-time --out $R/race
{
cat $R/gpu.log
for f in $R/small.json $R/torch_small.json $R/xl.json $R/xl_off.json $R/xl2.json $R/torch_xl.json $R/xl_fp32.json \
    $R/torch_xl_fp32.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); c=r.get('config',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3), c.get('compile_mode', '') if isinstance(c, dict) else '')" $f
done
echo "attention --short:"; tail -8 $R/attention.log
echo "attention --xl:"; tail -14 $R/attention_xl.log 2>/dev/null
echo "racecheck:"; grep -E "RACECHECK SUMMARY|failures|Error" $R/race_dwa.log 2>/dev/null | sort | uniq -c | head
} > $R/summary.log 2>&1
finish
