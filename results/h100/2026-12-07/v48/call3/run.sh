#!/bin/bash
# v48 call 3: on an H200, issue 19's rows (results/h200/2026-12-06/v40/prepared/call_h200.sh, LIMIT 370 s, its
# record under $OUT/issue19) and then the deterministic Hopper backward's probe (call2/run.sh, under $OUT/det); on
# any other GPU the probe only. Carry .dev: trainer.xz, flash.tar.xz.
O=$OUT
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p $O/issue19 && OUT=$O/issue19 LIMIT=370 bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
mkdir -p $O/det && OUT=$O/det bash results/h100/2026-12-07/v48/call2/run.sh
