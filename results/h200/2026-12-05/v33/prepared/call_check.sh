#!/bin/bash
# v33's production kernel (epilogue chunks of 16 x 128) in the trainer: the fused kernel's [cuda] tests, then the xl
# bf16 step (in_gemm auto) while time is left. Carry .dev (unit_tests.xz, trainer.xz). Any sm_90 GPU; ~2 minutes.
source launch/device_call.sh "$0"
unpack_bins unit_tests trainer
step dw_adamw_tests 60 .dev/bin/unit_tests "[dw_adamw]"
train_step xl configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
{
tail -2 $R/dw_adamw_tests.log
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['timing']['step']; print('xl', r['status'], \
t['median_ms'], t['mean_ms'], round(r['memory']['peak_bytes']/2**30, 3), r['loss']['per_step'][-1])" $R/xl.json
} > $R/summary.log 2>&1
finish
