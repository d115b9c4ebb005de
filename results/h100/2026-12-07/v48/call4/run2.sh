#!/bin/bash
# v48 call 4, second run: racecheck of the Hopper backward (call4/run.sh's trainer run at d 64) in the default mode
# beside the deterministic one (call4/run.sh's racecheck ended in "Internal Sanitizer Error: failed to handle a
# hardware exception"): is it the new mode or the tool on this kernel? Carry .dev: trainer.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
T="configs/small.json --set device=cuda --set precision=bf16 --set model.num_layers=1
 --set model.context_length=256 --set data.batch_size=2 --set bench.warmup_steps=0 --set bench.measure_steps=1
 --set cuda_graph=false --set output.results=$R/sanitized.json"
CS="compute-sanitizer --error-exitcode 9 --kernel-name kns=flash_bwd_sm90 --tool racecheck"
step race64_default 200 $CS .dev/bin/trainer $T --set deterministic=false
step race64_det 200 $CS .dev/bin/trainer $T --set deterministic=true
step race64_det_hazard 200 $CS --racecheck-report hazard .dev/bin/trainer $T --set deterministic=true
{
for n in race64_default race64_det race64_det_hazard; do echo "$n: $(grep -E 'Internal|RACECHECK SUMMARY' $R/$n.log | tr '\n' ' ')"; done
} > $R/summary.log 2>&1
finish
