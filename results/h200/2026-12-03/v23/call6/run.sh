#!/bin/bash
# v23 call6: variant E of the d 128 backward's dQ-tile stores (st.shared.v2 from four address registers with immediate
# offsets: dq_swizzle puts column col0 + 8j + 2t at col0 + 2t + 8 (j ^ row % 4); spill 48-64 -> 4 bytes) against
# production (8d124cd): rounds in both library orders, float64 checks, synccheck / racecheck / memcheck.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_old.tar.xz && tar xJf .dev/flash_e.tar.xz
cp .dev/call6.sh $R/run.sh
O=.dev/flash_old/libflashbench.so; N=.dev/flash_e/libflashbench.so
log unpacked
SH=4x4096x16x128,2x8192x16x128,4x2048x32x128
timeout 60 python3 launch/flash_bench/sm90_check.py --lib $N --prod $O --fwd '' --bwd 7,10 --rounds 21 --shapes $SH --out $R/rounds_a > $R/rounds_a.log 2>&1; log "rounds a rc $?"
timeout 60 python3 launch/flash_bench/sm90_check.py --lib $O --prod $N --fwd '' --bwd 7,10 --rounds 21 --shapes $SH --out $R/rounds_b > $R/rounds_b.log 2>&1; log "rounds b rc $?"
timeout 60 python3 launch/flash_bench/sm90_check.py --lib $N --prod $N --fwd 16 --bwd 7,10,20,31 --no-time --out $R/check_e > $R/check_e.log 2>&1; log "check e rc $?"
for t in synccheck racecheck memcheck; do timeout 60 compute-sanitizer --tool $t .dev/flash_e/smoke > $R/$t.log 2>&1; log "$t rc $?"; done
tar czf $OUT/r.tgz -C $OUT r
grep -E "checks:|FAIL" $R/check_e.log | head -5
for t in synccheck racecheck memcheck; do tail -1 $R/$t.log; done
for x in a b; do echo "== $x"; grep -E " bwd " $R/rounds_$x.log; done
