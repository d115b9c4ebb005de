#!/bin/bash
# v52 call1: where small's step goes today (the last small trace is v12's, on the H200): small bf16 bs 4 ctx 512
# with graphs twice, traced once (per-op ranges, uncaptured), beside the peer's reduce-overhead; on an H100.
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
S="--set bench.warmup_steps=5 --set bench.measure_steps=30"
train_step small1 configs/small.json $S
train_step small_trace configs/small.json --set bench.warmup_steps=2 --set bench.measure_steps=3 \
  --set profile.trace=$R/chrome_small.json
gzip -f $R/chrome_small.json
peer_step torch_small 150 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step small2 configs/small.json $S
{
cat $R/gpu.log
record_lines small1 small2 torch_small small_trace
trace_top small_trace 45
} > $R/summary.log 2>&1
finish
