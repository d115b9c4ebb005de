#!/bin/bash
# v48 call 1: the deterministic Hopper backward (bwd_sm90.cuh: dQ's contributions in key-tile order, the query loop
# from the last tile down). The [cuda] tests it touches ([flash]: the new bitwise / naive-attention cases with the
# workspace NaN-poisoned, every Hopper head dim, T up to 4097; [deterministic], [graph]: model runs bit for bit),
# then the price against the default: small, xl ctx 512 (twice deterministic: losses bit for bit) and xl ctx 2048,
# peaks against their plans, and xl traced in both modes (the attention backward's ms a step; v47 on an H100 with
# the mma.sync dQ pass: 3.64 default, 6.46 deterministic). Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step tests 300 .dev/bin/unit_tests "[flash],[deterministic],[graph]" --durations yes
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
D="--set deterministic=true"
TR="--set bench.warmup_steps=2 --set bench.measure_steps=2"
C2="--set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=4"
train_step small configs/small.json
train_step small_det configs/small.json $D
train_step xl configs/xl.json $X
train_step xl_det configs/xl.json $X $D
train_step xl_det2 configs/xl.json $X $D
train_step trace_def configs/xl.json $TR --set profile.trace=$R/chrome_def.json
train_step trace_det configs/xl.json $TR $D --set profile.trace=$R/chrome_det.json
rm -f $R/chrome_def.json $R/chrome_det.json
train_step xl2048 configs/xl.json $C2
train_step xl2048_det configs/xl.json $C2 $D
{
cat $R/gpu.log
grep -E 'test cases|assertions|passed|failed|FAILED|SKIP|skipped' $R/tests.log | tail -8
record_lines small small_det xl xl_det xl_det2 xl2048 xl2048_det
python3 - $R <<'PY'
import json, os, sys
def rec(n):
    f = os.path.join(sys.argv[1], n + ".json")
    return json.load(open(f)) if os.path.exists(f) else {}
def per(n, k):
    return (rec(n).get(k) or {}).get("per_step")
a, b = per("xl_det", "loss"), per("xl_det2", "loss")
print("xl deterministic twice, losses bit for bit:", a is not None and a == b, a, b)
print("xl default losses:", per("xl", "loss"))
for n in ["small", "small_det", "xl", "xl_det", "xl2048", "xl2048_det"]:
    t = rec(n).get("timing", {})
    print(n, "measured", (t.get("step") or {}).get("median_ms"), "planned", (t.get("predicted") or {}).get("step_ms"))
PY
trace_top trace_def 12
trace_top trace_det 12
} > $R/summary.log 2>&1
finish
