#!/bin/bash
# v43 call1: on an H200, issue 19's rows (results/h200/2026-12-06/v40/prepared/call_h200.sh; without .dev/flash.tar.xz
# its attention rows fail at once and the rest runs); on any other GPU, call_any.sh (v42 call2, ~2 min): the record's
# timing.predicted beside timing.step, and the checkpoint timeouts with two ranks on the GPU over comm mpi.
# Carry .dev: trainer.xz (main at 6ec6ee0), flash.tar.xz (launch/flash_bench/build.sh at 696a4c3).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
exec bash results/h100/2026-12-06/v43/prepared/call_any.sh
