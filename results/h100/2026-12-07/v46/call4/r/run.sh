#!/bin/bash
# v46 call4: dist_tests "[fsdp]" on 2 ranks sharing the GPU (comm mpi), with the GPU case of optimizer.in_backward
# (bit for bit against the update after the backward, one and two microbatches).
source launch/device_call.sh "$0"
unpack_bins dist_tests
step dist_fsdp 200 mpirun --allow-run-as-root --oversubscribe -np 2 .dev/bin/dist_tests "[fsdp]"
{ nvidia-smi --query-gpu=name --format=csv,noheader; grep -E "skipped|FAILED|passed|failed" $R/dist_fsdp.log | tail -6; } > $R/summary.log 2>&1
finish
