#!/bin/bash
# v48 call 4: compute-sanitizer on the deterministic Hopper backward through the trainer (small cut to 1 layer,
# context 256, batch 2, one measured step, no CUDA graph): memcheck and synccheck at d_head 64 (small's) and 80
# (d_model 640, 8 heads), racecheck at d 64 (its time limited); only the Hopper backward kernel is checked (--kernel-name kns=, as v36). Carry .dev: trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
T="configs/small.json --set device=cuda --set precision=bf16 --set deterministic=true --set model.num_layers=1
 --set model.context_length=256 --set data.batch_size=2 --set bench.warmup_steps=0 --set bench.measure_steps=1
 --set cuda_graph=false --set output.results=$R/sanitized.json"
D80="--set model.d_model=640 --set model.num_heads=8"
CS="compute-sanitizer --error-exitcode 9 --kernel-name kns=flash_bwd_sm90"
step mem64 120 $CS --tool memcheck .dev/bin/trainer $T
step sync64 120 $CS --tool synccheck .dev/bin/trainer $T
step mem80 120 $CS --tool memcheck .dev/bin/trainer $T $D80
step sync80 120 $CS --tool synccheck .dev/bin/trainer $T $D80
step race64 200 $CS --tool racecheck .dev/bin/trainer $T
{
cat $R/gpu.log
for n in mem64 sync64 mem80 sync80 race64; do echo "$n: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $R/$n.log | tail -1)"; done
grep "rc" $R/progress.log
} > $R/summary.log 2>&1
finish
