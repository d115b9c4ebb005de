#!/bin/bash
# v47 call 2: `deterministic: true` on the GPU. The [cuda] tests it touches ([deterministic]: two runs bit for bit at
# d_head 64 and 80, recompute none / full; [graph]: captured steps equal to uncaptured ones, now bitwise for flash2
# where deterministic; [flash]: the planner's backward workspace in both modes), then the step's price: small and
# xl, default against deterministic (xl twice: the losses bit for bit), peaks against their plans, and xl traced in
# both modes (the attention backward's ms a step). Carry .dev: trainer.xz, unit_tests.xz (strip, xz).
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step tests 300 .dev/bin/unit_tests "[deterministic],[graph],[flash]" --durations yes
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
D="--set deterministic=true"
TR="--set bench.warmup_steps=2 --set bench.measure_steps=2"
train_step small configs/small.json
train_step small_det configs/small.json $D
train_step xl configs/xl.json $X
train_step xl_det configs/xl.json $X $D
train_step xl_det2 configs/xl.json $X $D
train_step trace_def configs/xl.json $TR --set profile.trace=$R/chrome_def.json
train_step trace_det configs/xl.json $TR $D --set profile.trace=$R/chrome_det.json
rm -f $R/chrome_def.json $R/chrome_det.json
{
cat $R/gpu.log
grep -E 'test cases|assertions|passed|failed|SKIP|skipped' $R/tests.log | tail -6
record_lines small small_det xl xl_det xl_det2
python3 - $R <<'PY'
import json, os, sys
def per(n, k):
    f = os.path.join(sys.argv[1], n + ".json")
    return (json.load(open(f)).get(k) or {}).get("per_step") if os.path.exists(f) else None
a, b = per("xl_det", "loss"), per("xl_det2", "loss")
print("xl deterministic twice, losses bit for bit:", a is not None and a == b, a, b)
print("xl default losses:", per("xl", "loss"))
PY
trace_top trace_def 12
trace_top trace_det 12
} > $R/summary.log 2>&1
finish
