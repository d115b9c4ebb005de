#!/bin/bash
# v49 call 1: on an H200, issue 19's rows (results/h200/2026-12-06/v40/prepared/call_h200.sh, LIMIT 560 s: the
# trainer beside the peer's reduce-overhead at small and xl, the attention rows, then the H200-only extras while time
# is left). On any other GPU: HEAD's xl step in both attention modes (the deterministic one twice, for its bits after
# 4ed5f72's refactor, never run on a GPU) and the attention rows (bench.py --short) for the H100's reference.
# Carry .dev: trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=560 exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step xl configs/xl.json $X
train_step xl_det1 configs/xl.json $X --set deterministic=true
train_step xl_det2 configs/xl.json $X --set deterministic=true
step attention 90 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
{
cat $R/gpu.log
record_lines xl xl_det1 xl_det2
python3 - $R <<'PY2'
import json, os, sys
def per(n):
    f = os.path.join(sys.argv[1], n + ".json")
    return ((json.load(open(f)) if os.path.exists(f) else {}).get("loss") or {}).get("per_step")
a, b = per("xl_det1"), per("xl_det2")
print("xl deterministic twice, losses bit for bit:", a is not None and a == b, a, b)
print("xl default losses:", per("xl"))
PY2
echo "attention --short:"; tail -8 $R/attention.log
} > $R/summary.log 2>&1
finish
