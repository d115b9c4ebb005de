#!/bin/bash
# Why in_gemm auto ties with off on the H200 at xl (v34: 94.4 ms both; the bench's fused block -0.135 ms, 4.3 ms a
# step; the H100 gained 4.5-5.5 ms in v32): the xl bf16 step traced with each (profile.trace: the record's per-range
# summary splits forward / backward / optimizer and each op), then untraced, alternating; the SM clock and power
# sampled every 100 ms beside each run (v25 saw the 700 W cap lower the clock under heavy kernels, and the fused
# kernel runs its products and its epilogue's DRAM traffic at once). Any H200 (on an H100 auto wins: v32).
# Carry .dev/trainer.xz (xz -T2 -c build-cuda/trainer > .dev/trainer.xz). ~3 minutes.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv > $R/gpu.log 2>&1
# NAME CONFIG ARGS...: train_step with nvidia-smi sampling beside it into $R/smi_NAME.log
smi_step() {
  local n=$1
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > $R/smi_$n.log 2>&1 &
  local pid=$!
  train_step "$@"
  kill $pid 2>/dev/null
}
OFF="--set optimizer.in_gemm=false"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
T="--set bench.warmup_steps=2 --set bench.measure_steps=2"
smi_step xl_auto configs/xl.json $X
smi_step xl_off configs/xl.json $OFF $X
smi_step trace_auto configs/xl.json $T --set profile.trace=$R/chrome_auto.json
smi_step trace_off configs/xl.json $OFF $T --set profile.trace=$R/chrome_off.json
smi_step xl_auto2 configs/xl.json $X
smi_step xl_off2 configs/xl.json $OFF $X
rm -f $R/chrome_auto.json $R/chrome_off.json  # (the records keep the per-range summary; r.tgz stays small)
{
cat $R/gpu.log
echo "run, status, step median / mean / min ms, peak GiB; SM clock MHz median / min and power W max while it ran"
for n in xl_auto xl_off xl_auto2 xl_off2 trace_auto trace_off; do
  [ -f $R/$n.json ] && python3 - $R $n <<'PY'
import json, os, sys
R, n = sys.argv[1], sys.argv[2]
r = json.load(open(os.path.join(R, n + ".json")))
t = r["timing"]["step"]
clk, pw = [], []
for line in open(os.path.join(R, "smi_" + n + ".log")):
    f = [x.strip() for x in line.split(",")]
    try:
        clk.append(float(f[1]))
        pw.append(float(f[2]))
    except (ValueError, IndexError):
        pass
smi = f"{sorted(clk)[len(clk) // 2]:.0f} / {min(clk):.0f} MHz, {max(pw):.0f} W ({len(clk)} samples)" if clk else "-"
print(n, r["status"], t["median_ms"], t["mean_ms"], t["min_ms"], round(r["memory"]["peak_bytes"] / 2**30, 3), smi)
PY
done
for v in auto off; do
  echo "trace $v (ms per traced step, the record's profile.ranges, largest first):"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
[print(f\"  {x['cat']:>10} {x['name']:<40} {x['ms_per_step']:9.3f} ms {x['calls_per_step']:7.1f} calls\") for x in \
sorted(r['profile']['ranges'], key=lambda x: -x['ms_per_step'])[:25]]" $R/trace_$v.json
done
} > $R/summary.log 2>&1
finish
