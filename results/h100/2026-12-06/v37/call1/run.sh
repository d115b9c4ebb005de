#!/bin/bash
# The prepared DWA_EPI_WG experiment (kernels/dw_adamw/NOTES.md, 36th session; any Hopper card, about 5 minutes): the
# fused update without grad_in with a cooperative k-loop on two warpgroups and the epilogue on a third. First the
# debug build's quick checks (a stuck mbarrier wait prints and traps instead of hanging the call), then the float64
# checks and the bits against production (p, m, v, p_work; the sum of g^2 in another order), memcheck of the quick
# checks, the xl and small blocks beside production (fused, today's path; twice each, alternating), and, where the
# xl block is >= 3% faster, the xl step with a trainer built with it beside production's.
# Carry .dev: trainer.xz, trainer_epiwg.xz (launch/dw_adamw_bench/trainer_variant.sh epiwg -DDWA_EPI_WG), dwa.tar.xz
# (OBJ=/tmp/dwa-obj JOBS=2 bash launch/dw_adamw_bench/build.sh; tar cJf .dev/dwa.tar.xz -C .carry dwa).
source launch/device_call.sh "$0"
unpack_bins trainer trainer_epiwg
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
C="python3 launch/dw_adamw_bench/check.py"
step debug_check 90 $C --lib dwa/libdwa_epiwg_debug.so --quick --no-time --out $R/debug_check
if grep -q "dwa check: 0 failures" $R/debug_check.log; then
  step check 120 $C --lib dwa/libdwa_epiwg.so --no-time --same-as dwa/libdwa.so --same-order-free --out $R/check
  step memcheck 120 compute-sanitizer --tool memcheck --kernel-name kns=epiwg python3 launch/dw_adamw_bench/check.py \
    --lib dwa/libdwa_epiwg.so --quick --no-time --out $R/mc
  T="--no-check --variants fused,today --rounds 11"
  i=0
  for v in dwa dwa_epiwg dwa dwa_epiwg; do
    i=$((i + 1)); step t${i}_$v 90 $C --lib dwa/lib$v.so $T --out $R/t${i}_$v
  done
  if python3 - $R <<'PY'
import json, sys
def xl(n):
    return sum(r["median_ms"]["fused"] for r in json.load(open(f"{sys.argv[1]}/{n}/dwa_check.json"))["timing"]
               if r["block"] == "xl")
sys.exit(0 if (xl("t2_dwa_epiwg") + xl("t4_dwa_epiwg")) < 0.97 * (xl("t1_dwa") + xl("t3_dwa")) else 1)
PY
  then
    X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
    for n in xl xl_epiwg xl2 xl_epiwg2; do
      b=.dev/bin/trainer; [[ $n == xl_epiwg* ]] && b=.dev/bin/trainer_epiwg
      step $n 120 $b configs/xl.json --set device=cuda --set precision=bf16 --set name=$n \
        --set output.results=$R/$n.json $X
    done
  fi
fi
{
cat $R/gpu.log
grep -E "failures|FAIL|stuck" $R/debug_check.log | head -5
grep -E "^check|same as|failures" $R/check.log 2>/dev/null | cut -c1-160
grep -E "ERROR SUMMARY" $R/memcheck.log 2>/dev/null
for f in $R/t*_*.log; do echo "$(basename $f):"; tail -4 $f | head -3; done
record_lines xl xl_epiwg xl2 xl_epiwg2
} > $R/summary.log 2>&1
finish
