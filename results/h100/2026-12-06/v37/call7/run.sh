#!/bin/bash
# v37 call 7: the final trainer (5ef02fe: the start-up agreements polled with parallel.startup_timeout_s, the review's
# mends) on a GPU machine, as call 6 without the peer: every [cuda] test, two ranks on the GPU with comm mpi, an MPI
# error of rank 1 (record error), a config error of rank 1 alone (one line from rank 0), small and xl. Carry .dev:
# trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step cuda_tests 200 .dev/bin/unit_tests "[cuda]"
M="mpirun --allow-run-as-root --oversubscribe"
step mpi2 90 $M -np 2 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 \
  --set parallel.strategy=ddp_bucketed --set parallel.comm=mpi --set bench.warmup_steps=2 \
  --set bench.measure_steps=3 --set output.results=$R/mpi2.json
T="configs/tiny.json --set device=cpu --set parallel.strategy=ddp_flat --set bench.measure_steps=3"
step mpierr 60 $M -np 1 .dev/bin/trainer $T --set output.results=$R/mpierr.json : -np 1 env TRAINER_TEST_MPI_ERROR=1 \
  .dev/bin/trainer $T --set output.results=$R/mpierr.json
step cfgerr 60 $M -np 1 .dev/bin/trainer $T --set output.results=$R/cfgerr.json : -np 1 .dev/bin/trainer $T \
  --set output.results=$R/cfgerr.json --set optimizer.lr=-1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
train_step xl configs/xl.json $X
{
cat $R/gpu.log
tail -3 $R/cuda_tests.log
record_lines mpi2
echo "mpierr:"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['status'], r.get('error'))" \
  $R/mpierr.json
echo "cfgerr (trainer lines):"; grep "^trainer:" $R/cfgerr.log; ls $R/cfgerr.json 2>&1 | tail -1
record_lines small xl
} > $R/summary.log 2>&1
finish
