#!/bin/bash
# v24 call7 (written as call8.sh): the final build (G = the power of two at or below d / 8): the [flash] unit tests and memcheck of the
# ragged every-head-dim case; one ncu pass of the preprocess at xl's shapes.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
xz -dc .dev/trainer.xz > .dev/bin/trainer; xz -dc .dev/unit_tests.xz > .dev/bin/unit_tests; chmod +x .dev/bin/*
cp .dev/call8.sh $R/run.sh
log unpacked
timeout 150 .dev/bin/unit_tests "[flash]" > $R/flash_tests.log 2>&1; log "flash tests rc $?"
timeout 100 compute-sanitizer --tool memcheck .dev/bin/unit_tests "flash2 matches naive attention: small and ragged*" > $R/memcheck.log 2>&1; log "memcheck rc $?"
timeout 60 ncu --clock-control none --kernel-name regex:"flash_bwd_pre" --launch-skip 1 --launch-count 2 --metrics gpu__time_duration.sum \
  .dev/bin/trainer configs/xl.json --set model.num_layers=1 --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 --set bench.measure_steps=2 --set name=ncu_xl --set output.results=$R/ncu_xl.json > $R/ncu_xl.txt 2>&1; log "ncu xl rc $?"
tar czf $OUT/r.tgz -C $OUT r
tail -2 $R/flash_tests.log; grep -E "ERROR SUMMARY|All tests" $R/memcheck.log; grep -E "preprocess_kernel|gpu__time" $R/ncu_xl.txt | cut -c1-120
cat $R/progress.log
