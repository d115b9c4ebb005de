#!/bin/bash
source launch/device_call.sh "$0"
unpack_bins trainer
M="--set model.num_layers=4 --set parallel.comm=mpi --set bench.warmup_steps=1 --set bench.measure_steps=4 --set gemm_autotune=false"
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
for n in off1 off2 on1 on2; do
  ib=false; [[ $n == on* ]] && ib=true
  step $n 120 $MPI .dev/bin/trainer configs/xl_fsdp.json $M --set optimizer.in_backward=$ib --set output.results=$R/$n.json
done
{
record_lines off1 off2 on1 on2
python3 - $R <<'PY'
import json, os, sys
L = {}
for n in ("off1", "off2", "on1", "on2"):
    f = os.path.join(sys.argv[1], n + ".json")
    if os.path.exists(f):
        L[n] = json.load(open(f))["loss"]["per_step"]
        print(n, L[n])
print({(a, b): L[a] == L[b] for a in L for b in L if a < b})
PY
} > $R/summary.log 2>&1
finish
