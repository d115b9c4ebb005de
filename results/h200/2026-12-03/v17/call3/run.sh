#!/bin/bash
# v17 call3: every [cuda] unit test after the 16-byte alignment tests moved into kernels/align.h (one definition).
mkdir -p $OUT/r && python3 -c "import lzma,shutil; shutil.copyfileobj(lzma.open('.dev/unit_tests.xz'), open('/tmp/ut','wb'))" && chmod +x /tmp/ut && timeout 200 /tmp/ut "[cuda]" > $OUT/r/unit_cuda.log 2>&1; echo rc $?; tail -3 $OUT/r/unit_cuda.log
