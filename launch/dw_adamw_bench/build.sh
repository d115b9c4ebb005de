#!/bin/bash
# Builds the check/benchmark library of the fused weight gradient + AdamW kernel (ctypes; launch/dw_adamw_bench/
# check.py) into .carry/dwa/ (ignored): kernels/dw_adamw/dw_adamw_sm90.cu for sm_90a, the trainer's AdamW, reductions,
# cuBLASLt wrapper and device_sm_count (kernels/device.cu) for sm_90, launch/dw_adamw_bench/capi.cu; and
# libdwa_debug.so with DWA_HANG_CHECK (bounded mbarrier waits that print and trap; ptxas then serializes its wgmma,
# C7510: for checks, not timing) and libdwa_regs.so with DWA_EPI_REGS (the epilogue from the accumulator registers,
# v28b, beside the default staged one until measured). Run from the repository root. Needs nvcc (13.0), cuBLASLt and
# the fmt headers (EXTRA_INC: an extra include folder); the library links the CUDA runtime statically and cuBLASLt
# dynamically.
set -euo pipefail
out=.carry/dwa
obj=${OBJ:-/tmp/dwa-obj}
mkdir -p $out $obj
flags="-std=c++20 -O3 -Ikernels -Isrc --expt-relaxed-constexpr -lineinfo -DSPDLOG_HEADER_ONLY \
  -DFMT_HEADER_ONLY -DSPDLOG_FMT_EXTERNAL -DTRAINER_SM90=1 -Xcompiler -fPIC"
if [ -n "${EXTRA_INC:-}" ]; then flags="$flags -I$EXTRA_INC"; fi
srcs="kernels/adamw.cu kernels/reductions.cu kernels/device.cu launch/dw_adamw_bench/capi.cu"
echo $srcs | tr ' ' '\n' | xargs -P ${JOBS:-2} -I{} sh -c \
  'nvcc '"$flags"' -arch=sm_90 -c {} -o '"$obj"'/$(basename {} .cu).o'
g++ -std=c++20 -O2 -fPIC -Ikernels -Isrc -I$(dirname $(which nvcc))/../include -DFMT_HEADER_ONLY \
  ${EXTRA_INC:+-I$EXTRA_INC} \
  -c src/backend/cuda/matmul.cpp -o $obj/matmul.o
nvcc $flags -gencode=arch=compute_90a,code=sm_90a -c kernels/dw_adamw/dw_adamw_sm90.cu -o $obj/dw_adamw_sm90.o
nvcc $flags -DDWA_HANG_CHECK -gencode=arch=compute_90a,code=sm_90a -c kernels/dw_adamw/dw_adamw_sm90.cu \
  -o $obj/dw_adamw_sm90_debug.o
nvcc $flags -DDWA_EPI_REGS -gencode=arch=compute_90a,code=sm_90a -c kernels/dw_adamw/dw_adamw_sm90.cu \
  -o $obj/dw_adamw_sm90_regs.o
objs=$(for f in $srcs src/backend/cuda/matmul.cpp; do echo $obj/$(basename ${f%.*}).o; done)
nvcc -shared -arch=sm_90 -o $out/libdwa.so $objs $obj/dw_adamw_sm90.o -lcublasLt
nvcc -shared -arch=sm_90 -o $out/libdwa_debug.so $objs $obj/dw_adamw_sm90_debug.o -lcublasLt
nvcc -shared -arch=sm_90 -o $out/libdwa_regs.so $objs $obj/dw_adamw_sm90_regs.o -lcublasLt
echo "built $out/libdwa.so, $out/libdwa_debug.so (DWA_HANG_CHECK: a stuck mbarrier wait prints and traps)," \
  "$out/libdwa_regs.so (DWA_EPI_REGS: v28b's register epilogue, to compare)"
