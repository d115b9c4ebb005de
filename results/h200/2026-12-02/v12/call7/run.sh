#!/bin/bash
# v12 call 7: the PyTorch FSDP2 peer path (never run before) on the one GPU there is: world size 1 under torchrun,
# tiny and xl, to check its wiring before a two-GPU machine is lent (issue 20).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
timeout 120 torchrun --nproc_per_node 1 launch/torch_bench.py --preset tiny --parallel fsdp2 --mode bf16 --warmup 1 --steps 2 --json $R/fsdp2_tiny_1gpu.json > $R/fsdp2_tiny.log 2>&1; echo "tiny rc $?" >> $R/progress.log
timeout 150 torchrun --nproc_per_node 1 launch/torch_bench.py --preset xl --parallel fsdp2 --mode bf16 --warmup 2 --steps 5 --json $R/fsdp2_xl_1gpu.json > $R/fsdp2_xl.log 2>&1; echo "xl rc $?" >> $R/progress.log
cat $R/progress.log; tail -4 $R/fsdp2_tiny.log; tail -4 $R/fsdp2_xl.log
