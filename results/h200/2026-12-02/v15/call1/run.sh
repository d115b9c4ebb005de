#!/bin/bash
# v15 call1: d 96 on the Hopper kernels: float64 checks of every variant (d 64 / 80 / 96 / 128) and bitwise forward
# comparison; timing at 16 x T 16384 and 4 x 32 heads (d 96) beside the mma.sync kernels and SDPA; the small model's
# attention shape; smoke run under racecheck / memcheck / synccheck; every [cuda] unit test
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash .dev/bin
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke
unxz .dev/unit_tests.xz .dev/bin/unit_tests; unxz .dev/trainer.xz .dev/bin/trainer
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
cd launch/flash_bench
L=../../.carry/flash/libflashbench.so
timeout 240 python3 sm90_check.py --lib $L --prod $L --fwd 30,31,32,33,0,10,20 --bwd 30,31,0,10,20 --d96 \
  --shapes 4x512x12x64,4x512x8x96 --out $R > $R/sm90_check.log 2>&1; log "check rc $?"
cd ../..
tar czf $OUT/r.tgz -C $OUT r
for tool in racecheck memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool .carry/flash/smoke > $R/${tool}_smoke.log 2>&1; log "$tool rc $?"
done
tar czf $OUT/r.tgz -C $OUT r
timeout 170 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|bit for bit|worst|FAIL" $R/sm90_check.log | head -40; grep -h "SUMMARY\|smoke:" $R/*_smoke.log
tail -3 $R/unit_cuda.log
grep -E "x96|x64 T512|x128 T16384|x64 T16384" $R/sm90_check.log
cat $R/progress.log
