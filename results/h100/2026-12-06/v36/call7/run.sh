#!/bin/bash
# Issue 19 on an H200 (about 7 minutes; v36's calls all came as H100s): the trainer beside the PyTorch peer's
# reduce-overhead (its fastest at small and xl ctx 512 on the H200 in v19 / v24) at small and xl, the 16-head
# attention shapes beside SDPA (--short), then in_gemm off beside auto and both traced with the SM clock and power
# sampled (why auto ties with off on the H200, v34), d 80 at the xl shapes (--xl), xl fp32 beside the peer's fp32
# eager step (on an H200 only: the rest has H100 records, v35 and v36), and the peer's compile default at small and
# xl while time is left. Carry .dev: trainer.xz (xz -T2 -c build-cuda/trainer),
# flash.tar.xz (launch/flash_bench/build.sh, then tar cJf .dev/flash.tar.xz -C .carry flash).
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step small configs/small.json
peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step xl configs/xl.json $X
peer_step torch_xl 170 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
step attention 60 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
if grep -q H200 $R/gpu.log; then
  smi_step() {  # NAME CONFIG ARGS...: train_step with nvidia-smi's clock and power every 100 ms beside it
    local n=$1
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > $R/smi_$n.log 2>&1 &
    local pid=$!
    train_step "$@"
    kill $pid 2>/dev/null
  }
  OFF="--set optimizer.in_gemm=false"
  TR="--set bench.warmup_steps=2 --set bench.measure_steps=2"
  smi_step xl_off configs/xl.json $OFF $X
  smi_step trace_auto configs/xl.json $TR --set profile.trace=$R/chrome_auto.json
  smi_step trace_off configs/xl.json $OFF $TR --set profile.trace=$R/chrome_off.json
  rm -f $R/chrome_auto.json $R/chrome_off.json
  [ $(left $L) -gt 120 ] && step attention_xl 90 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so \
    --xl --no-check --out $R/xlshapes
  F32="--set precision=fp32 --set fp32_matmul=3xtf32 --set bench.warmup_steps=2 --set bench.measure_steps=5"
  [ $(left $L) -gt 150 ] && train_step xl_fp32 configs/xl.json $F32
  [ $(left $L) -gt 110 ] && peer_step torch_xl_fp32 100 --preset xl --warmup 2 --steps 5 --mode fp32
fi
# the peer's compile default beside its reduce-overhead (on the H100 never run; on the H200 slower in v19 / v24)
[ $(left $L) -gt 100 ] && peer_step torch_small_default 90 --preset small --warmup 5 --steps 30 --compile-mode default
[ $(left $L) -gt 120 ] && peer_step torch_xl_default $(( $(left $L) - 15 )) --preset xl --warmup 3 --steps 10 \
  --compile-mode default
{
cat $R/gpu.log
for n in small torch_small torch_small_default xl torch_xl torch_xl_default xl_off xl_fp32 torch_xl_fp32; do
  [ -f $R/$n.json ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[2], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3))" $R/$n.json $n
done
echo "attention --short:"; tail -8 $R/attention.log
[ -f $R/attention_xl.log ] && { echo "attention --xl (f+b rows):"; grep -E '"f\+b"' $R/attention_xl.log | cut -c1-160; }
for n in xl_off trace_auto trace_off; do
  [ -f $R/smi_$n.log ] && python3 - $R $n <<'PY'
import os, sys
R, n = sys.argv[1], sys.argv[2]
clk, pw = [], []
for line in open(os.path.join(R, "smi_" + n + ".log")):
    f = [x.strip() for x in line.split(",")]
    try:
        clk.append(float(f[1])); pw.append(float(f[2]))
    except (ValueError, IndexError):
        pass
if clk:
    print(n, f"SM clock median {sorted(clk)[len(clk) // 2]:.0f} / min {min(clk):.0f} MHz, power max {max(pw):.0f} W")
PY
done
for v in auto off; do
  [ -f $R/trace_$v.json ] || continue
  echo "trace $v (ms per traced step, largest first):"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
[print(f\"  {x['cat']:>10} {x['name']:<40} {x['ms_per_step']:9.3f} ms {x['calls_per_step']:7.1f} calls\") for x in \
sorted(r['profile']['ranges'], key=lambda x: -x['ms_per_step'])[:20]]" $R/trace_$v.json
done
} > $R/summary.log 2>&1
finish
