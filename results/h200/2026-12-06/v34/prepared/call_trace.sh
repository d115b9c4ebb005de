#!/bin/bash
# Why in_gemm auto ties with off on the H200 at xl (v34: 94.4 ms both; the bench's fused block -0.135 ms, 4.3 ms a
# step; the H100 gained 4.5-5.5 ms in v32): the xl bf16 step traced with each (profile.trace: the record's per-range
# summary splits forward / backward / optimizer and each op), then untraced again, alternating. Any H200 (on an H100
# the answer is already known: auto wins there). Carry .dev/trainer.xz (xz -T2 -c build-cuda/trainer > .dev/trainer.xz).
# ~3 minutes.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $R/gpu.log 2>&1
OFF="--set optimizer.in_gemm=false"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
T="--set bench.warmup_steps=2 --set bench.measure_steps=2"
train_step xl_auto configs/xl.json $X
train_step xl_off configs/xl.json $OFF $X
train_step trace_auto configs/xl.json $T --set profile.trace=$R/chrome_auto.json
train_step trace_off configs/xl.json $OFF $T --set profile.trace=$R/chrome_off.json
train_step xl_auto2 configs/xl.json $X
train_step xl_off2 configs/xl.json $OFF $X
rm -f $R/chrome_auto.json $R/chrome_off.json  # (the records keep the per-range summary; r.tgz stays small)
{
cat $R/gpu.log
for f in $R/xl_*.json $R/trace_*.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r['timing']['step']; \
print(sys.argv[1].split('/')[-1], r['status'], t['median_ms'], t['mean_ms'], t['min_ms'], round(r['memory']['peak_bytes']/2**30, 3))" $f
done
for v in auto off; do
  echo "trace $v (ms per traced step, the record's profile.ranges, largest first):"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
[print(f\"  {x['cat']:>10} {x['name']:<40} {x['ms_per_step']:9.3f} ms {x['calls_per_step']:7.1f} calls\") for x in \
sorted(r['profile']['ranges'], key=lambda x: -x['ms_per_step'])[:25]]" $R/trace_$v.json
done
} > $R/summary.log 2>&1
finish
