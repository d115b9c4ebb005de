#!/bin/bash
# v37 call 8: two ranks on the GPU with comm mpi took 338 ms a step in call 6 (a4aee4d) and 526 in call 7 (5ef02fe,
# another machine). Is it the change to the MPI communicator's polling (MPI_Testall with statuses, for the failed
# request's own error code) or the machine? The same step with 5ef02fe and with 5ef02fe's polling put back to
# MPI_STATUSES_IGNORE (trainer_ignore), alternating, three times each. Carry .dev: trainer.xz, trainer_ignore.xz.
source launch/device_call.sh "$0"
unpack_bins trainer trainer_ignore
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
for i in 1 2 3; do
  for b in trainer trainer_ignore; do
    step ${b}_$i 60 mpirun --allow-run-as-root --oversubscribe -np 2 .dev/bin/$b configs/small.json --set device=cuda \
      --set precision=bf16 --set parallel.strategy=ddp_bucketed --set parallel.comm=mpi --set bench.warmup_steps=2 \
      --set bench.measure_steps=3 --set output.results=$R/${b}_$i.json
  done
done
{ cat $R/gpu.log; record_lines trainer_1 trainer_ignore_1 trainer_2 trainer_ignore_2 trainer_3 trainer_ignore_3; } > $R/summary.log 2>&1
finish
