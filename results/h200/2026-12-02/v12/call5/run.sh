#!/bin/bash
# v12 call 5: the graph test with gemm_autotune off (deterministic algorithm choice), twice, then every [cuda] test.
set -u
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
mkdir -p .dev/bin
gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/*
for i in 1 2; do timeout 120 .dev/bin/unit_tests "[graph]" > $R/unit_graph_$i.log 2>&1; log "unit graph $i rc $?"; done
timeout 240 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit cuda rc $?"
log done
tar czf $OUT/r.tgz -C $OUT r
grep -h "passed\|failed" $R/unit_graph_*.log $R/unit_cuda.log | tail -8
