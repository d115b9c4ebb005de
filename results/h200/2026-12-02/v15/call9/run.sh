#!/bin/bash
# v15 call9: after the Hopper dispatch rules moved into one definition (backend/cuda_sizes.h, host code only): every
# [cuda] unit test
set -u
R=$OUT/r; mkdir -p $R
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/unit_tests.xz .dev/bin/unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
timeout 170 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; echo "unit [cuda] rc $?" | tee $R/progress.log
tail -2 $R/unit_cuda.log
