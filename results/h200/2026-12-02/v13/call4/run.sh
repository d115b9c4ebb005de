#!/bin/bash
# v13 call 4 (exploration build, /work/notes/adamw_bench.cpp against kernels/adamw.cu with env-selected variants):
# AdamW's bandwidth against a device-to-device copy moving the same 30 bytes per element, same process.
# variant 0 = production; 1 = the bf16 working copy as one 8-byte store; 2 = 1 + two float4 per thread in flight;
# GDIV = grid divided by this (no sum of squares); SUMSQ = with the fused sum of g^2 (grid <= 1023).
set -u
R=$OUT/r; mkdir -p $R
B=.dev/adamw_bench; chmod +x $B
for n in 104857600 7077888; do
  for sq in "" 1; do
    for var in 0 1 2; do
      for gd in 1 4; do
        [[ -n "$sq" && $gd != 1 ]] && continue
        env ${sq:+SUMSQ=1} TRAINER_X_ADAMW=$var TRAINER_X_GDIV=$gd timeout 60 $B $n >> $R/bench.txt 2>&1
      done
    done
  done
done
cat $R/bench.txt
