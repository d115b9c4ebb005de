#!/bin/bash
# v48 call 5: deterministic under fsdp with the Hopper backward's ordered dQ (v47 call3 ran the mma.sync dQ pass):
# two ranks sharing the GPU over comm mpi, xl_fsdp cut to 4 layers, twice deterministic and once default. Carry .dev:
# trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
M="--set model.num_layers=4 --set parallel.comm=mpi --set bench.warmup_steps=1 --set bench.measure_steps=4"
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
for n in det1 det2 def; do
  D="--set deterministic=true"; [ $n = def ] && D=""
  step fsdp_$n 200 $MPI .dev/bin/trainer configs/xl_fsdp.json $M $D --set output.results=$R/fsdp_$n.json
done
{
cat $R/gpu.log
record_lines fsdp_det1 fsdp_det2 fsdp_def
python3 - $R <<'PY'
import json, os, sys
L = {}
for n in ("fsdp_det1", "fsdp_det2", "fsdp_def"):
    f = os.path.join(sys.argv[1], n + ".json")
    if os.path.exists(f):
        L[n] = (json.load(open(f)).get("loss") or {}).get("per_step")
        print(n, "loss", L[n])
if len(L) == 3:
    print("fsdp deterministic twice, losses bit for bit:", L["fsdp_det1"] == L["fsdp_det2"],
          "; default equal to them:", L["fsdp_def"] == L["fsdp_det1"])
PY
} > $R/summary.log 2>&1
finish
