#!/bin/bash
# Builds the FlashAttention check/benchmark library (ctypes) and the sanitizer smoke test into .carry/flash/
# (ignored), from kernels/flash_attn/*.cu, kernels/device.cu and launch/flash_bench/{capi,sm90_capi,smoke}.cu. Run from the repository
# root. The Hopper kernels (kernels/flash_attn/sm90.cu, launch/flash_bench/sm90_capi.cu) compile for sm_90a, the rest
# for sm_90, all with TRAINER_SM90 (as the CMake build for architecture 90). Needs nvcc (13.0) and the fmt
# headers (EXTRA_INC: an extra include folder, e.g. .carry/inc on a machine without them); the outputs link the CUDA
# runtime statically (no other .so). SM90_ONLY=1 recompiles only the two sm_90a files (the others' objects kept).
set -euo pipefail
out=.carry/flash
obj=${OBJ:-/tmp/flashbench-obj}
mkdir -p $out $obj
flags="-std=c++20 -O3 -Ikernels -Isrc --expt-relaxed-constexpr -lineinfo -DSPDLOG_HEADER_ONLY \
  -DFMT_HEADER_ONLY -DSPDLOG_FMT_EXTERNAL -DTRAINER_SM90=1 -Xcompiler -fPIC"
if [ -n "${EXTRA_INC:-}" ]; then flags="$flags -I$EXTRA_INC"; fi
sm90="kernels/flash_attn/sm90.cu launch/flash_bench/sm90_capi.cu"
srcs="$(ls kernels/flash_attn/*.cu | grep -v sm90.cu) kernels/device.cu launch/flash_bench/capi.cu"
if [ -z "${SM90_ONLY:-}" ]; then
  echo $srcs | tr ' ' '\n' | xargs -P ${JOBS:-2} -I{} sh -c \
    'nvcc '"$flags"' -arch=sm_90 -c {} -o '"$obj"'/$(basename {} .cu).o'
fi
echo $sm90 | tr ' ' '\n' | xargs -P 2 -I{} sh -c \
  'nvcc '"$flags"' -gencode=arch=compute_90a,code=sm_90a -c {} -o '"$obj"'/$(basename {} .cu).o'
objs=$(for f in $srcs $sm90; do echo $obj/$(basename $f .cu).o; done)  # not stale objects of removed files
nvcc -shared -arch=sm_90 -o $out/libflashbench.so $objs
nvcc $flags -arch=sm_90 -o $out/smoke launch/flash_bench/smoke.cu -L$out -lflashbench -Xlinker -rpath='$ORIGIN'
echo "built $out/libflashbench.so $out/smoke"
