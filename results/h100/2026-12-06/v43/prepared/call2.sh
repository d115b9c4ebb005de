#!/bin/bash
# v43 call2: issue 19's rows on an H200 only (results/h200/2026-12-06/v40/prepared/call_h200.sh with LIMIT 420 s: its
# optional rows only while time is left); any other GPU exits at once (3). Carry .dev: trainer.xz (main at 6ec6ee0),
# flash.tar.xz (launch/flash_bench/build.sh at 696a4c3).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${LIMIT:-420} exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
nvidia-smi --query-gpu=name --format=csv,noheader
exit 3
