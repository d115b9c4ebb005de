#!/bin/bash
# v39, production with O's rescale skipped at d 64 / 128 (ffe586c): every [cuda] test, an xl bf16 step with its
# planned peak. Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step cuda_tests 300 .dev/bin/unit_tests "[cuda]"
train_step xl configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
{
cat $R/gpu.log
tail -3 $R/cuda_tests.log
record_lines xl
} > $R/summary.log 2>&1
finish
