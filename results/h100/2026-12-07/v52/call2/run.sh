#!/bin/bash
# v52 call 2 (any GPU): every [cuda] unit test at this session's HEAD (a43774c; sessions 50-51 changed the
# communicator's failure agreement, train setup and the checkpointer since v49's run at 12cfed3), the GPU-only pytest
# cases, then checkpointing.policy none against the default selective (h1, h2, g kept instead of recomputed) at small
# and xl ctx 512, alternating. Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step tests 300 .dev/bin/unit_tests "[cuda]" --durations yes
if python3 -c "import pytest" 2>/dev/null; then
  TRAINER_BIN=$PWD/.dev/bin/trainer TRAINER_SOURCE_DIR=$PWD step pytest_gpu 200 python3 -m pytest -q -rs \
    -p no:cacheprovider tests/cli/test_plan.py::test_gpu_record_has_predicted_step_time tests/parity/test_bf16_pure.py
else
  log "no pytest in this python3"
fi
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
N="--set checkpointing.policy=none"
train_step small_sel1 configs/small.json $S
train_step small_none1 configs/small.json $S $N
train_step small_sel2 configs/small.json $S
train_step small_none2 configs/small.json $S $N
train_step xl_sel1 configs/xl.json $X
train_step xl_none1 configs/xl.json $X $N
train_step xl_sel2 configs/xl.json $X
train_step xl_none2 configs/xl.json $X $N
{
cat $R/gpu.log
grep -E 'test cases|assertions|passed|failed|FAILED|SKIP|skipped' $R/tests.log | tail -8
tail -6 $R/pytest_gpu.log 2>/dev/null
record_lines small_sel1 small_none1 small_sel2 small_none2 xl_sel1 xl_none1 xl_sel2 xl_none2
python3 - $R <<'PY2'
import json, os, sys
def per(n):
    f = os.path.join(sys.argv[1], n + ".json")
    return ((json.load(open(f)) if os.path.exists(f) else {}).get("loss") or {}).get("per_step")
for m in ("small", "xl"):
    a, b = per(m + "_sel1"), per(m + "_none1")
    print(m, "selective and none, step 1 loss equal (later steps differ by the atomic dQ):", a and b and a[0] == b[0])
PY2
} > $R/summary.log 2>&1
finish
