#!/bin/bash
# v37 call 6: the session's final trainer (a4aee4d: MPI errors return instead of aborting inside MPI, the start-up
# agreements polled with a deadline, the manifest's checks) on a GPU machine: every [cuda] test; two ranks on the GPU
# with comm mpi (ddp_bucketed, small bf16) and an MPI error of rank 1 (TRAINER_TEST_MPI_ERROR: record error, not
# MPI_ERRORS_ARE_FATAL) under this machine's Open MPI; small and xl beside the peer's reduce-overhead. Carry .dev:
# trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step cuda_tests 200 .dev/bin/unit_tests "[cuda]"
M="mpirun --allow-run-as-root --oversubscribe"
step mpi2 90 $M -np 2 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 \
  --set parallel.strategy=ddp_bucketed --set parallel.comm=mpi --set bench.warmup_steps=2 \
  --set bench.measure_steps=3 --set output.results=$R/mpi2.json
T="configs/tiny.json --set device=cpu --set parallel.strategy=ddp_flat --set bench.measure_steps=3 --set output.results=$R/mpierr.json"
step mpierr 60 $M -np 1 .dev/bin/trainer $T : -np 1 env TRAINER_TEST_MPI_ERROR=1 .dev/bin/trainer $T
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
[ $(left $L) -gt 150 ] && peer_step torch_xl $(( $(left $L) - 10 )) --preset xl --warmup 3 --steps 10 \
  --compile-mode reduce-overhead
{
cat $R/gpu.log
tail -3 $R/cuda_tests.log
echo "mpi2 rc: $(grep -c 'mpi2 rc 0' $R/progress.log)"; record_lines mpi2
echo "mpierr:"; python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['status'], r.get('error'))" \
  $R/mpierr.json; grep -c MPI_ERRORS_ARE_FATAL $R/mpierr.log
record_lines small torch_small xl torch_xl
} > $R/summary.log 2>&1
finish
