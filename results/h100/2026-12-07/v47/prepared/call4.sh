#!/bin/bash
# v47 call 4: the four [cuda] model cases whose "model.preset=small" had run on the embedded default's dims (d_model
# 128, 4 heads: d_head 32, so the graph case's flash2 rows never reached the Hopper kernels); now on small's dims
# (test_cuda_model.cpp's cuda_config). Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step tests 300 .dev/bin/unit_tests "cuda model: 20 bf16 steps*,cuda model: steps replayed*,cuda model: deterministic*,cuda model: optimizer.in_gemm*" --durations yes
{
cat $R/gpu.log
grep -E '^[0-9.]+ s: ' $R/tests.log
grep -oE 'model: [0-9]+ parameters \([^)]*\), d_model [0-9]+, d_ff [0-9]+, [0-9]+ layers, [0-9]+ heads, vocab [0-9]+, context [0-9]+' $R/tests.log | sort | uniq -c
grep -E 'FAILED|test cases|assertions|passed|failed' $R/tests.log | tail -8
} > $R/summary.log 2>&1
finish
