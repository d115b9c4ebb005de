#!/bin/bash
# Builds the check/benchmark library of the fused weight gradient + AdamW kernel (ctypes; launch/dw_adamw_bench/
# check.py) into .carry/dwa/ (ignored): kernels/dw_adamw/dw_adamw_sm90.cu for sm_90a, the trainer's AdamW, reductions,
# cuBLASLt wrapper and device_sm_count (kernels/device.cu) for sm_90, launch/dw_adamw_bench/capi.cu; and libdwa_debug.so
# with DWA_HANG_CHECK (bounded mbarrier waits that print and trap; ptxas then serializes its wgmma, C7510: for checks,
# not timing). An experiment adds a variant (name:defines, commas between defines; v33's are in git history, 476ee15;
# the 33rd-35th sessions' DWA_CLUSTER_PAIR, 2-CTA clusters sharing an operand panel by TMA multicast, at 4cac9f9;
# the 36th session's DWA_COOP (cooperative and 64 x 256 product tiles), DWA_COOP_NOSTORE, DWA_SUMSQ32 and
# DWA_NOSUMSQ at a30f5ab; kernels/dw_adamw/NOTES.md's 35th- and 36th-session entries). Now: libdwa_epiwg.so and
# libdwa_epiwg_debug.so, DWA_EPI_WG (the update's epilogue on a warpgroup of its own; prepared, not yet run). Run
# from the repository root. Needs nvcc (13.0), cuBLASLt and the fmt headers (EXTRA_INC: an extra include folder); the
# library links the CUDA runtime statically and cuBLASLt dynamically.
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
# The kernel's libraries: name and defines
variants=${VARIANTS:-"dwa: dwa_debug:-DDWA_HANG_CHECK dwa_epiwg:-DDWA_EPI_WG dwa_epiwg_debug:-DDWA_EPI_WG,-DDWA_HANG_CHECK"}
echo $variants | tr ' ' '\n' | xargs -P ${JOBS:-2} -I{} sh -c 'v={}; n=${v%%:*}; d=$(echo ${v#*:} | tr , " "); \
  nvcc '"$flags"' $d -gencode=arch=compute_90a,code=sm_90a -c kernels/dw_adamw/dw_adamw_sm90.cu \
  -o '"$obj"'/k_$n.o'
objs=$(for f in $srcs src/backend/cuda/matmul.cpp; do echo $obj/$(basename ${f%.*}).o; done)
for v in $variants; do
  n=${v%%:*}
  nvcc -shared -arch=sm_90 -o $out/lib$n.so $objs $obj/k_$n.o -lcublasLt
done
echo "built in $out: libdwa.so (production), libdwa_debug.so (DWA_HANG_CHECK: a stuck mbarrier wait prints and" \
  "traps)"
