#!/bin/bash
# Issue 19 on an H200 (about 7.5 minutes; v36-v40 got H100s only): v36's call with v40's sustained / rested f+b
# probe after the attention rows. The trainer beside the PyTorch peer's reduce-overhead (its fastest at small and
# xl ctx 512 on the H200 in v19 / v24) at small and xl, the 16-head attention shapes beside SDPA (--short), then
# in_gemm off beside auto and both traced with the SM clock and power sampled (why auto ties with off on the H200,
# v34), d 80 at the xl shapes (--xl), xl fp32 beside the peer's fp32 eager step (on an H200 only: the rest has H100
# records, v35 and v36), and the peer's compile default at small and xl while time is left. Carry .dev: trainer.xz
# (xz -T2 -c build-cuda/trainer), flash.tar.xz (launch/flash_bench/build.sh, then tar cJf .dev/flash.tar.xz -C
# .carry flash).
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
# ours against SDPA's f+b sustained / rested / in turn (v40 call7 on an H100: d 64 0.965 / 0.901 / 0.872)
step fair 60 python3 results/h100/2026-12-06/v40/call7/fairprobe.py flash/libflashbench.so
if grep -q H200 $R/gpu.log; then
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
# the peer's compile default beside its reduce-overhead (slower on the H200 in v19 / v24 and on an H100 in v36 call7)
[ $(left $L) -gt 100 ] && peer_step torch_small_default 90 --preset small --warmup 5 --steps 30 --compile-mode default
[ $(left $L) -gt 120 ] && peer_step torch_xl_default $(( $(left $L) - 15 )) --preset xl --warmup 3 --steps 10 \
  --compile-mode default
{
cat $R/gpu.log
record_lines small torch_small torch_small_default xl torch_xl torch_xl_default xl_off xl_fp32 torch_xl_fp32
echo "attention --short:"; tail -8 $R/attention.log; cat $R/fair.log
[ -f $R/attention_xl.log ] && { echo "attention --xl (f+b rows):"; grep -E '"f\+b"' $R/attention_xl.log | cut -c1-160; }
smi_lines xl_off trace_auto trace_off
trace_top trace_auto
trace_top trace_off
} > $R/summary.log 2>&1
finish
