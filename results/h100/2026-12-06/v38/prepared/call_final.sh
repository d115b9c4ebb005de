#!/bin/bash
# v38, the session's final trainer build (9c7608a; the step's code as v37's, the host side with SIGPIPE ignored):
# every [cuda] test, small and xl bf16 steps with their planned peaks; on an H200 also the peer's reduce-overhead
# beside them (issue 19's step bars). Carry .dev: trainer.xz, unit_tests.xz.
source launch/device_call.sh "$0"
unpack_bins trainer unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
step cuda_tests 300 .dev/bin/unit_tests "[cuda]"
train_step small configs/small.json
train_step xl configs/xl.json $X
if grep -q H200 $R/gpu.log; then
  peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
  peer_step torch_xl 170 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
fi
# a closed stdout on the GPU: the run still ends with its record (status ok)
.dev/bin/trainer configs/small.json --set bench.measure_steps=20 --set output.results=$R/pipe.json 2>&1 | head -1 \
  > $R/pipe.log
{
cat $R/gpu.log
tail -3 $R/cuda_tests.log
record_lines small xl torch_small torch_xl pipe
} > $R/summary.log 2>&1
finish
