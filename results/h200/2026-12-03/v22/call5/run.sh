#!/bin/bash
# v22 call5 (the command line as run, with call4's library .dev/flash_x): d 128 persistent forward with ping-pong
# (16) against without (15, production until this call) in 21 rounds at four shapes.
mkdir -p $OUT/r && tar xJf .dev/flash_x.tar.xz && C=.dev/flash_x/libflashbench.so && timeout 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 16,15 --bwd '' --rounds 21 --shapes 4x4096x16x128,2x8192x16x128,4x2048x32x128 --out $OUT/r/rounds > $OUT/r/rounds.log 2>&1; echo rc $?; grep x128 $OUT/r/rounds.log
