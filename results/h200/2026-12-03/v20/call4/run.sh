#!/bin/bash
# v20 call4: d 64 backward on 128-query tiles in production: every [cuda] unit test; racecheck / memcheck of the
# flash smoke run; the sm90 checks (production variants 7, 10, 20, 31) and timings; small and medium steps (d 64,
# T 512: no change expected; the previous binary beside it in call5).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/unit_tests.xz .dev/bin/unit_tests
tar xJf .dev/flash.tar.xz
cp .dev/call4.sh $R/run.sh
log unpacked
timeout 60 compute-sanitizer --tool racecheck .carry/flash/smoke > $R/racecheck_smoke.log 2>&1; log "racecheck rc $?"
timeout 60 compute-sanitizer --tool memcheck .carry/flash/smoke > $R/memcheck_smoke.log 2>&1; log "memcheck rc $?"
timeout 150 python3 launch/flash_bench/sm90_check.py --fwd 0,10 --bwd 7,0,10 --shapes 4x512x12x64,4x512x16x64,4x4096x12x64,1x8192x12x64 --out $R > $R/check.log 2>&1; log "sm90_check rc $?"
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
run small_new1 trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
run medium_new1 trainer configs/medium.json --set bench.warmup_steps=3 --set bench.measure_steps=15
timeout 240 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $? $(tail -2 $R/unit_cuda.log | head -1)"
tar czf $OUT/r.tgz -C $OUT r
grep -h "RACECHECK SUMMARY\|ERROR SUMMARY\|smoke:" $R/racecheck_smoke.log $R/memcheck_smoke.log
grep -A30 "^checks" $R/check.log | head -40
grep -h "done:" $R/*.log
cat $R/progress.log
