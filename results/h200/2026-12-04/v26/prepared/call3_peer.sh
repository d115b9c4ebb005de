#!/bin/bash
# v26 call3 (prepared; run only if call1 shows in_gemm winning): issue 19's ratios with in_gemm, beside the PyTorch
# peer in its fastest mode at these sizes (reduce-overhead, v24) in the same call: xl ctx 512, small, xl ctx 2048.
# Carry .dev with trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
run() { local n=$1 c=$2; shift 2
  step $n 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n \
    --set output.results=$R/$n.json "$@"; }
peer() { local n=$1; shift
  step $n 240 python3 launch/torch_bench.py --mode compiled "$@" --compile-mode reduce-overhead --json $R/$n.json; }
run xl_gemm configs/xl.json --set optimizer.in_gemm=true --set bench.warmup_steps=3 --set bench.measure_steps=10
run xl_plain configs/xl.json --set optimizer.in_gemm=false --set bench.warmup_steps=3 --set bench.measure_steps=10
peer torch_xl --preset xl --warmup 3 --steps 10
run small_gemm configs/small.json --set optimizer.in_gemm=true
peer torch_small --preset small --warmup 5 --steps 30
if [ $(left 560) -gt 150 ]; then
  run xl2048_gemm configs/xl.json --set optimizer.in_gemm=true --set model.context_length=2048 \
    --set bench.warmup_steps=2 --set bench.measure_steps=5
fi
python3 launch/compare_results.py $R/*.json 2>&1 | tail -20
cat $R/progress.log
