#!/bin/bash
# One device call for the v33 work: the epilogue experiments (call_epi.sh, ~2-4 minutes) into $OUT/epi; then the xl
# bf16 step (in_gemm auto) with each variant whose xl block beat production's by >= 3% in that bench (a trainer built
# with the variant's define: .dev/trainer_<variant>.xz), interleaved with production's trainer, into $OUT/steps; then
# with what is left of ~580 s, the peer comparisons of call_peer.sh into $OUT/peer.
# Carry .dev (dwa.tar.xz, trainer.xz, trainer_wide.xz, trainer_widetma.xz; a variant without its trainer is not stepped).
d=$(dirname "$0"); t=$(date +%s)
mkdir -p $OUT/epi $OUT/steps $OUT/peer
OUT=$OUT/epi bash $d/call_epi.sh
win=$(python3 - $OUT/epi/r <<'PY'
import json, sys, os
r = sys.argv[1]
def block(n):
    try:
        rows = json.load(open(os.path.join(r, n, "dwa_check.json")))["timing"]
    except Exception:
        return None
    return sum(x["median_ms"]["fused"] for x in rows if x["block"] == "xl")
base = min(b for b in (block("time_prod"), block("time_prod2")) if b) if (block("time_prod") or block("time_prod2")) else None
out = []
for v in ("widetma", "wide", "tma"):
    b = block("time_" + v)
    if base and b and b < 0.97 * base and os.path.exists(f".dev/trainer_{v}.xz"):
        out.append((b, v))
print(" ".join(v for _, v in sorted(out)))
PY
)
echo "variants that won the bench: ${win:-none}"
OUT=$OUT/steps WIN="$win" bash -c '
source launch/device_call.sh
unpack_bins trainer
log "variants: ${WIN:-none}"
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
for v in $WIN; do unpack_bins trainer_$v; done
if [ -n "$WIN" ]; then
  train_step xl_prod configs/xl.json $X
  for v in $WIN; do
    step xl_$v 120 .dev/bin/trainer_$v configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_$v \
      --set output.results=$R/xl_$v.json $X
  done
  train_step xl_prod2 configs/xl.json $X
  for v in $WIN; do
    step xl_${v}_2 120 .dev/bin/trainer_$v configs/xl.json --set device=cuda --set precision=bf16 --set name=xl_${v}_2 \
      --set output.results=$R/xl_${v}_2.json $X
  done
  for f in $R/xl_*.json; do python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get(\"timing\",{}).get(\"step\",{}); \
m=r.get(\"memory\",{}); print(sys.argv[1].split(\"/\")[-1], r.get(\"status\"), t.get(\"median_ms\"), t.get(\"mean_ms\"), \
round((m.get(\"peak_bytes\") or 0)/2**30, 3), (r.get(\"loss\") or {}).get(\"per_step\", [None])[-1])" $f; done > $R/summary.log 2>&1
  cat $R/summary.log
fi
save'
OUT=$OUT/peer LIMIT=$(( 575 - ($(date +%s) - t) )) bash $d/call_peer.sh
