#!/bin/bash
# v36 call 6: (a) the fused kernel's fp64 sum of g^2 (call 5's ncu of the product alone: 29% of the warps' stall
# samples "math", on the DMUL / DADD of that sum), as one fp64 add a float4 (DWA_SUMSQ32) and left out (timing
# only); (b) on an H200 only: issue
# 19's lean bars (small, xl beside the peer's reduce-overhead; the 16-head attention beside SDPA) and in_gemm auto
# against off traced with the SM clock and power (v34/prepared/call_trace.sh's steps). Carry .dev: trainer.xz,
# flash.tar.xz, dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz .dev/dwa.tar.xz
L=${LIMIT:-585}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
# the sum of g^2 with a float4's squares in fp32 (DWA_SUMSQ32): its checks (the sum within 1e-6 of float64's), the
# same p / m / v / p_work bits as production; then the fused kernel, the product alone and today's path, xl and
# small, production / s32 / no sum at all (timing only) / production
step s32_check 90 $C --lib dwa/libdwa_s32.so --no-time --same-as dwa/libdwa.so --same-order-free --out $R/s32_check
i=0
for v in dwa dwa_s32 dwa_nosq dwa; do
  i=$((i + 1)); step t${i}_$v 90 $C --lib dwa/lib$v.so --no-check --out $R/t${i}_$v
done
if grep -q H200 $R/gpu.log; then
  X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
  train_step small configs/small.json
  peer_step torch_small 100 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
  train_step xl configs/xl.json $X
  peer_step torch_xl 170 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
  step attention 60 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short --no-check --out $R/short
  smi_step() {
    local n=$1
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > $R/smi_$n.log 2>&1 &
    local pid=$!
    train_step "$@"
    kill $pid 2>/dev/null
  }
  OFF="--set optimizer.in_gemm=false"
  TR="--set bench.warmup_steps=2 --set bench.measure_steps=2"
  [ $(left $L) -gt 100 ] && smi_step xl_off configs/xl.json $OFF $X
  [ $(left $L) -gt 80 ] && smi_step trace_auto configs/xl.json $TR --set profile.trace=$R/chrome_auto.json
  [ $(left $L) -gt 60 ] && smi_step trace_off configs/xl.json $OFF $TR --set profile.trace=$R/chrome_off.json
  rm -f $R/chrome_auto.json $R/chrome_off.json
fi
{
cat $R/gpu.log
grep -E "^check|same as|failures" $R/s32_check.log | cut -c1-200
for f in $R/t*_*.log; do echo "$(basename $f):"; tail -12 $f | head -11; done
for f in $R/small.json $R/torch_small.json $R/xl.json $R/torch_xl.json $R/xl_off.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); p=(m.get('predicted') or {}).get('peak_bytes') or 0; \
print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 3), 'planned', round(p/2**30, 3))" $f
done
[ -f $R/attention.log ] && { echo "attention --short:"; tail -8 $R/attention.log; }
for v in auto off; do
  [ -f $R/trace_$v.json ] || continue
  echo "trace $v (ms per traced step, largest first):"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
[print(f\"  {x['cat']:>10} {x['name']:<40} {x['ms_per_step']:9.3f} ms {x['calls_per_step']:7.1f} calls\") for x in \
sorted(r['profile']['ranges'], key=lambda x: -x['ms_per_step'])[:20]]" $R/trace_$v.json
done
} > $R/summary.log 2>&1
finish
