#!/bin/bash
# v46 call3 (H100): fsdp's two buffer classes on the GPU. dist_tests [fsdp] on 2 ranks sharing the GPU (comm mpi; its
# GPU case gathers odd_model, whose embedding and head are their own class, with the compute stream delayed), then
# the trainer on xl cut to 4 layers with a 200000-token vocabulary (embedding and head 5x a block: two classes),
# optimizer.in_backward on and off: each peak against its plan.
source launch/device_call.sh "$0"
unpack_bins trainer dist_tests
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
step dist_fsdp 150 $MPI .dev/bin/dist_tests "[fsdp]"
M="--set model.num_layers=4 --set model.vocab_size=200000 --set parallel.comm=mpi --set bench.warmup_steps=1 --set bench.measure_steps=3"
for ib in true false; do
  step v200k_ib_$ib 150 $MPI .dev/bin/trainer configs/xl_fsdp.json $M --set optimizer.in_backward=$ib \
    --set output.results=$R/v200k_ib_$ib.json
done
{
tail -4 $R/dist_fsdp.log
record_lines v200k_ib_true v200k_ib_false
for n in v200k_ib_true v200k_ib_false; do grep -h "fsdp:" $R/$n.log | head -1 | cut -c1-400; done
python3 - $R <<'PY'
import json, os, sys
for n in ("v200k_ib_true", "v200k_ib_false"):
    f = os.path.join(sys.argv[1], n + ".json")
    if os.path.exists(f):
        print(n, json.load(open(f))["loss"]["per_step"])
PY
} > $R/summary.log 2>&1
finish
