#!/bin/bash
# Compiles the Hopper (sm_90a) FlashAttention variants (launch/flash_bench/sm90_capi.cu) and links them with the
# objects of build.sh (OBJ, default /tmp/flashbench-obj; run build.sh once first) into .carry/flash/libflashbench.so,
# for launch/flash_bench/sm90_check.py. Run from the repository root; nvcc 13.
set -euo pipefail
obj=${OBJ:-/tmp/flashbench-obj}
flags="-std=c++20 -O3 -Ikernels -Isrc --expt-relaxed-constexpr -lineinfo -DSPDLOG_HEADER_ONLY -DFMT_HEADER_ONLY \
  -DSPDLOG_FMT_EXTERNAL -Xcompiler -fPIC"
if [ -n "${EXTRA_INC:-}" ]; then flags="$flags -I$EXTRA_INC"; fi
nvcc $flags -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c launch/flash_bench/sm90_capi.cu -o $obj/sm90_capi.o \
  2>&1 | grep -E "error|warning|registers|spill" | grep -v "^$" || true
test -f $obj/sm90_capi.o
nvcc -shared -arch=sm_90 -o .carry/flash/libflashbench.so $obj/*.o
echo "built .carry/flash/libflashbench.so (with sm90_capi.o)"
