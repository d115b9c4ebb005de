#!/bin/bash
# v21 call6: every [cuda] unit test with the new dq_swizzle (855f325 build).
set -u
R=$OUT/r; mkdir -p $R
export NCCL_NVLS_ENABLE=0
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" .dev/unit_tests.xz .dev/unit_tests && chmod +x .dev/unit_tests
cp .dev/call6.sh $R/run.sh
timeout 300 .dev/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; echo "rc $?" >> $R/unit_cuda.log
tail -4 $R/unit_cuda.log
