#!/bin/bash
# v46: on an H200, issue 19's rows (results/h200/2026-12-06/v40/prepared/call_h200.sh, LIMIT 420 s). On any other
# GPU, fsdp's v46 changes on the GPU (fsdp has never run on one): two ranks sharing the GPU over parallel.comm mpi,
# xl_fsdp cut to 4 layers, optimizer.in_backward on and off (the same losses expected, bit for bit; the peak of
# each against its plan), then on with prefetch_layers 0. Carry .dev: trainer.xz (xz -T2 -c build-cuda/trainer),
# flash.tar.xz (the H200 rows only).
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${LIMIT:-420} exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
M="--set model.num_layers=4 --set parallel.comm=mpi --set bench.warmup_steps=1 --set bench.measure_steps=4"
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
for ib in true false; do
  step fsdp_ib_$ib 200 $MPI .dev/bin/trainer configs/xl_fsdp.json $M --set optimizer.in_backward=$ib \
    --set output.results=$R/fsdp_ib_$ib.json
done
step fsdp_ib_p0 200 $MPI .dev/bin/trainer configs/xl_fsdp.json $M --set parallel.prefetch_layers=0 \
  --set output.results=$R/fsdp_ib_p0.json
{
cat $R/gpu.log
record_lines fsdp_ib_true fsdp_ib_false fsdp_ib_p0
python3 - $R <<'PY'
import json, os, sys
L = {}
for n in ("fsdp_ib_true", "fsdp_ib_false", "fsdp_ib_p0"):
    f = os.path.join(sys.argv[1], n + ".json")
    if os.path.exists(f):
        r = json.load(open(f))
        L[n] = (r.get("loss") or {}).get("per_step")
        print(n, "loss", L[n], "grad_norm", (r.get("grad_norm") or {}).get("per_step"), "error", r.get("error"))
if len(L) == 3:
    print("in_backward on = off (losses, bit for bit):", L["fsdp_ib_true"] == L["fsdp_ib_false"],
          "; prefetch 0 = 2:", L["fsdp_ib_p0"] == L["fsdp_ib_true"])
PY
for n in fsdp_ib_true fsdp_ib_false fsdp_ib_p0; do grep -h "fsdp:" $R/$n.log | head -1 | cut -c1-400; done
} > $R/summary.log 2>&1
finish
