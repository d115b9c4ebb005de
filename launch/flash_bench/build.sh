#!/bin/bash
# Builds the FlashAttention-2 check/benchmark library (ctypes) and the sanitizer smoke test into .carry/flash/
# (ignored), from kernels/flash_attn/*.cu and launch/flash_bench/{capi,smoke}.cu. Run from the repository root.
# Needs nvcc (13.0) and the fmt headers (EXTRA_INC: an extra include folder, e.g. .carry/inc on a machine without them);
# the outputs link the CUDA runtime statically (no other .so).
set -euo pipefail
out=.carry/flash
obj=${OBJ:-/tmp/flashbench-obj}
mkdir -p $out $obj
flags="-std=c++20 -arch=sm_90 -O3 -Ikernels -Isrc --expt-relaxed-constexpr -lineinfo -DSPDLOG_HEADER_ONLY \
  -DFMT_HEADER_ONLY -DSPDLOG_FMT_EXTERNAL -Xcompiler -fPIC"
if [ -n "${EXTRA_INC:-}" ]; then flags="$flags -I$EXTRA_INC"; fi
srcs="$(ls kernels/flash_attn/*.cu) launch/flash_bench/capi.cu"
jobs=${JOBS:-2}
echo $srcs | tr ' ' '\n' | xargs -P $jobs -I{} sh -c \
  'nvcc '"$flags"' -c {} -o '"$obj"'/$(basename {} .cu).o'
nvcc -shared -arch=sm_90 -o $out/libflashbench.so $obj/*.o
nvcc $flags -o $out/smoke launch/flash_bench/smoke.cu -L$out -lflashbench -Xlinker -rpath='$ORIGIN'
echo "built $out/libflashbench.so $out/smoke"
