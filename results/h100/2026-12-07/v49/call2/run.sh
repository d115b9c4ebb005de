#!/bin/bash
# v49 call 2 (any GPU): every [cuda] unit test at this session's HEAD (v48's last two changes never ran on a GPU:
# flash_api's ordered_dq refactor and the bitwise case's T 4096 shape made bf16 only), then xl in both attention modes,
# the deterministic one twice (its losses bit for bit). Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step tests 330 .dev/bin/unit_tests "[cuda]" --durations yes
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step xl configs/xl.json $X
train_step xl_det1 configs/xl.json $X --set deterministic=true
train_step xl_det2 configs/xl.json $X --set deterministic=true
{
cat $R/gpu.log
grep -E 'test cases|assertions|passed|failed|FAILED|SKIP|skipped' $R/tests.log | tail -8
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
} > $R/summary.log 2>&1
finish
