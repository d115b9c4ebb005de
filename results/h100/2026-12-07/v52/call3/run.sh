#!/bin/bash
# v52 call 3 (any GPU; issue 19's rows on an H200 when one comes): on an H200, v40's prepared call (every row of the
# issue); on another card, the row its H100 table lacks: xl bf16 bs 4 ctx 2048 beside the peer's reduce-overhead and
# compile default (v48 timed the trainer alone there: 340.6 ms), then the --short attention rows. Carry .dev:
# trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${LIMIT:-540} exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
L=${LIMIT:-540}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="--set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=6"
train_step xl2048 configs/xl.json $C
peer_step torch_xl2048 200 --preset xl --ctx 2048 --warmup 2 --steps 6 --compile-mode reduce-overhead
train_step xl2048b configs/xl.json $C
[ $(left $L) -gt 100 ] && step attention 70 python3 launch/flash_bench/bench.py --lib flash/libflashbench.so --short \
  --no-check --out $R/short
[ $(left $L) -gt 150 ] && peer_step torch_xl2048_default $(( $(left $L) - 15 )) --preset xl --ctx 2048 --warmup 2 \
  --steps 6 --compile-mode default
{
cat $R/gpu.log
record_lines xl2048 xl2048b torch_xl2048 torch_xl2048_default
echo "attention --short:"; tail -8 $R/attention.log 2>/dev/null
} > $R/summary.log 2>&1
finish
