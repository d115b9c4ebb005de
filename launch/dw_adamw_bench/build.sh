#!/bin/bash
# Builds the check/benchmark library of the fused weight gradient + AdamW kernel (ctypes; launch/dw_adamw_bench/
# check.py) into .carry/dwa/ (ignored): kernels/dw_adamw/dw_adamw_sm90.cu for sm_90a, the trainer's AdamW, reductions,
# cuBLASLt wrapper and device_sm_count (kernels/device.cu) for sm_90, launch/dw_adamw_bench/capi.cu; and libdwa_debug.so
# with DWA_HANG_CHECK (bounded mbarrier waits that print and trap; ptxas then serializes its wgmma, C7510: for checks,
# not timing). An experiment adds a variant (name:defines, commas between defines) to `variants` below, or passes
# them in VARIANTS (e.g. VARIANTS="dwa_x:-DDWA_X" builds only that library, next to the ones already in .carry/dwa).
# Earlier experiments are in git history: v33's at 476ee15; DWA_CLUSTER_PAIR (33rd-35th sessions) at 4cac9f9;
# DWA_COOP, DWA_COOP_NOSTORE, DWA_SUMSQ32, DWA_NOSUMSQ (36th) at a30f5ab; DWA_EPI_WG with its diagnostic builds and
# DWA_NO_SETMAXNREG (37th) at 4a41f01 (kernels/dw_adamw/NOTES.md's 33rd-37th-session entries). Run
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
variants=${VARIANTS:-"dwa: dwa_debug:-DDWA_HANG_CHECK"}
echo $variants | tr ' ' '\n' | xargs -P ${JOBS:-2} -I{} sh -c 'v={}; n=${v%%:*}; d=$(echo ${v#*:} | tr , " "); \
  nvcc '"$flags"' $d -gencode=arch=compute_90a,code=sm_90a -c kernels/dw_adamw/dw_adamw_sm90.cu \
  -o '"$obj"'/k_$n.o'
objs=$(for f in $srcs src/backend/cuda/matmul.cpp; do echo $obj/$(basename ${f%.*}).o; done)
for v in $variants; do
  n=${v%%:*}
  nvcc -shared -arch=sm_90 -o $out/lib$n.so $objs $obj/k_$n.o -lcublasLt
done
echo "built in $out:$(for v in $variants; do printf ' lib%s.so' "${v%%:*}"; done) (libdwa.so: production;" \
  "libdwa_debug.so: DWA_HANG_CHECK, a stuck mbarrier wait prints and traps)"
