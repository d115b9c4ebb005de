#!/bin/bash
# v37 call 9: the final trainer (fd55a9b, the polling back to MPI_STATUSES_IGNORE): two ranks on the GPU with comm
# mpi three times (call 8: 325-359 ms with it, 360-565 with statuses), an MPI error of rank 1 (record error), small.
# Carry .dev: trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
M="mpirun --allow-run-as-root --oversubscribe"
for i in 1 2 3; do
  step mpi2_$i 60 $M -np 2 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 \
    --set parallel.strategy=ddp_bucketed --set parallel.comm=mpi --set bench.warmup_steps=2 \
    --set bench.measure_steps=3 --set output.results=$R/mpi2_$i.json
done
T="configs/tiny.json --set device=cpu --set parallel.strategy=ddp_flat --set bench.measure_steps=3"
step mpierr 60 $M -np 1 .dev/bin/trainer $T --set output.results=$R/mpierr.json : -np 1 env TRAINER_TEST_MPI_ERROR=1 \
  .dev/bin/trainer $T --set output.results=$R/mpierr.json
train_step small configs/small.json
{
cat $R/gpu.log; record_lines mpi2_1 mpi2_2 mpi2_3 small
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('mpierr', r['status'], r.get('error'))" $R/mpierr.json
} > $R/summary.log 2>&1
finish
