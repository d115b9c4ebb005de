#!/bin/bash
# v25 call5 (prepared, not run: no device after call4): the dQ tile protocol's second form
# (dq_first_store_overlap.patch: ticket before the tile's wait, ready bit after the next tile's wait). Carry .dev
# with flash_fs2.tar.xz (launch/flash_bench/build.sh of the patched tree, renamed flash_fs2), trainer.xz and
# unit_tests.xz of the patched tree, and this folder's bwd_calls.py (call4's with a causal argument). ncu of production (first store) against the variant
# of the same configuration (dq_accum zeroed) at call4's four shapes and a non-causal d 64 one (review: there every
# later contributor may wait a tile for the deferred ready bit), float64 checks, memcheck / synccheck, the [flash]
# and [cuda] tests, an xl step, rounds with what is left.
source launch/device_call.sh "$0"
unpack_tar .dev/flash_fs2.tar.xz
unpack_bins trainer unit_tests
cp .dev/bwd_calls.py $R/
L=$PWD/flash_fs2/libflashbench.so
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
prof() { local sh=$1 v=$2 rep=$3 c=${4:-1} var; for var in 0 $v; do
  step "ncu_v${var}_$(echo $sh | tr ' ' x)_c${c}_$rep" 60 ncu --kernel-name regex:"flash_bwd" --launch-skip 3 --launch-count 6 $M \
    python3 .dev/bwd_calls.py $L $sh 3 $var $c; done; }
prof "1 16384 16 128" 10 1; prof "4 512 32 80" 20 1; prof "4 2048 32 80" 20 1; prof "4 512 12 64" 7 1
prof "1 16384 16 64" 7 1 0; prof "4 2048 16 64" 7 1 0
prof "1 16384 16 128" 10 2; prof "4 512 32 80" 20 2
step check 60 python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd '' --bwd 7,10,20,31 --no-time --out $R/check
step memcheck 60 compute-sanitizer --tool memcheck flash_fs2/smoke
step synccheck 60 compute-sanitizer --tool synccheck flash_fs2/smoke
step flash_tests 150 .dev/bin/unit_tests "[flash]"
step cuda_tests 90 .dev/bin/unit_tests "[cuda]"
step xl1 60 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl1 \
  --set output.results=$R/xl1.json --set bench.warmup_steps=3 --set bench.measure_steps=10
if [ $(left 560) -gt 40 ]; then
  step rounds $(left 560) python3 launch/flash_bench/sm90_check.py --lib $L --prod $L --fwd '' --bwd 7,10,20,31 --rounds 11 --no-check --xl --out $R/rounds
fi
grep -E "cases|worst|FAIL" $R/check.log | head -8; grep -E " bwd " $R/rounds.log
grep -E "ERROR SUMMARY" $R/memcheck.log $R/synccheck.log; tail -2 $R/flash_tests.log $R/cuda_tests.log
cat $R/progress.log
