#!/bin/bash
# v14 call5 (call3 and call4 merged: device starts were scarce): production forward switched (d 64 overlap + ping-pong,
# d 128 overlap, d 80 the new loop without): float64 checks of every variant and bitwise comparison; interleaved rounds
# vs the previous production (old lib); sanitizers of the smoke run; every [cuda] unit test; AdamW bandwidth variants (session 13's unrun call4)
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash .carry/flash_old .dev/bin
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/libold.xz .carry/flash_old/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke
unxz .dev/unit_tests.xz .dev/bin/unit_tests; unxz .dev/adamw_bench.xz .dev/bin/adamw_bench
log unpacked
cd launch/flash_bench
L=../../.carry/flash/libflashbench.so; P=../../.carry/flash_old/libflashbench.so
timeout 150 python3 sm90_check.py --lib $L --prod $P --fwd 0,3,4,1,5,6,10,12,13,14,15,16,20,21,23,24 --bwd 0,10,20 --no-time --out $R > $R/sm90_check.log 2>&1; log "check rc $?"
timeout 150 python3 sm90_check.py --lib $L --prod $P --fwd 0,6,3,10,15,16,12,13,14,20,24 --bwd "" --rounds 9 --xl --out $R > $R/rounds.log 2>&1; log "rounds rc $?"
timeout 60 python3 sm90_check.py --lib $L --prod $P --fwd 0,10,20 --bwd "" --no-check --out $R/burst > $R/burst.log 2>&1; log "burst rc $?"
cd ../..
tar czf $OUT/r.tgz -C $OUT r
for tool in racecheck memcheck synccheck; do
  timeout 60 compute-sanitizer --tool $tool .carry/flash/smoke > $R/${tool}_smoke.log 2>&1; log "$tool rc $?"
done
timeout 150 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $?"
tar czf $OUT/r.tgz -C $OUT r
for var in 0 1 2; do for gd in 1 2 4; do TRAINER_X_ADAMW=$var TRAINER_X_GDIV=$gd timeout 20 .dev/bin/adamw_bench >> $R/adamw_variants.log 2>&1; done; done
SUMSQ=1 timeout 20 .dev/bin/adamw_bench >> $R/adamw_variants.log 2>&1
log done
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|bit for bit" $R/sm90_check.log; grep -h "SUMMARY\|smoke:" $R/*_smoke.log
tail -3 $R/unit_cuda.log
tail -36 $R/rounds.log
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]
        print("%-10s step %8.2f ms  peak %.2f GiB" % (os.path.basename(f)[:-5], t["mean_ms"], d["memory"]["peak_bytes"] / 2**30))
    except Exception:
        pass
PY
cat $R/adamw_variants.log
