#!/bin/bash
# v15 call6 (final code after review: one split rule keyed by kernel family, a CPU test of it, the forward boundary
# test, d 96 in bench.py's checks incl. the deterministic backward and the mma.sync variants 50; smoke's d 96 split
# case): every [cuda] unit test; bench.py float64 checks (no timing); smoke under racecheck / memcheck / synccheck
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash .dev/bin
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke; unxz .dev/unit_tests.xz .dev/bin/unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
timeout 170 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
timeout 30 .dev/bin/unit_tests "[planner]" > $R/unit_planner.log 2>&1; log "unit [planner] rc $?"
tar czf $OUT/r.tgz -C $OUT r
for tool in racecheck memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool .carry/flash/smoke > $R/${tool}_smoke.log 2>&1; log "$tool rc $?"
done
tar czf $OUT/r.tgz -C $OUT r
timeout 240 python3 launch/flash_bench/bench.py --lib .carry/flash/libflashbench.so --no-time --out $R > $R/bench_checks.log 2>&1
log "bench checks rc $?"
tar czf $OUT/r.tgz -C $OUT r
tail -2 $R/unit_cuda.log; tail -2 $R/unit_planner.log
grep -h "SUMMARY\|smoke:" $R/*_smoke.log
grep -E "checks:|worst|FAIL" $R/bench_checks.log | head -20
cat $R/progress.log
