#!/bin/bash
# v31 one call (the device came rarely this session, each failed start costing 90 s, so the two prepared calls are
# folded into one, most needed first): every [cuda] test (the first GPU run of the 29th / 30th sessions' changes),
# issue 19's ratios beside the PyTorch peer in its fastest mode at these sizes (reduce-overhead, v24: small, xl ctx
# 512 with in_gemm off and on), the dw_adamw library's checks and times, v30's checks (phases' peaks against --plan,
# the naive attention sub-ranges in a trace), then ncu of the fused kernel and racecheck while time is left.
# Ran on an H100 in the 31st session (results/h100/2026-12-05/v31/call1, with the epilogue variants since removed);
# this is its H200 form: the bars of issue 19 are an H200's.
# Carry .dev (dwa.tar.xz, trainer.xz, unit_tests.xz).
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
unpack_bins trainer unit_tests
T=.dev/bin/trainer
C=launch/dw_adamw_bench/check.py
L=${LIMIT:-585}
step cuda_tests 200 .dev/bin/unit_tests "[cuda]"
train_step small configs/small.json
peer_step torch_small 150 --preset small --warmup 5 --steps 30 --compile-mode reduce-overhead
train_step small_gemm configs/small.json --set optimizer.in_gemm=true --set optimizer.in_gemm_min_elements=0
X="--set bench.warmup_steps=3 --set bench.measure_steps=10"
train_step xl_plain configs/xl.json --set optimizer.in_gemm=false $X
peer_step torch_xl 200 --preset xl --warmup 3 --steps 10 --compile-mode reduce-overhead
train_step xl_gemm configs/xl.json --set optimizer.in_gemm=true --set optimizer.in_gemm_min_elements=0 $X
step check 120 python3 $C --lib dwa/libdwa.so --quick --no-time --out $R/check
step time 100 python3 $C --lib dwa/libdwa.so --no-check --rounds 7 --out $R/time
# v30's checks
XL="configs/xl.json --set device=cuda --set precision=bf16 --set bench.warmup_steps=2 --set bench.measure_steps=3"
for ph in forward forward_backward; do
  step plan_$ph 60 $T --plan $XL --set bench.phase=$ph --json
  cp $R/plan_$ph.log $R/plan_$ph.json
  step xl_$ph 120 $T $XL --set bench.phase=$ph --set name=xl_$ph --set output.results=$R/xl_$ph.json
done
step plan_train_step 60 $T --plan $XL --set optimizer.in_gemm=false --json  # as xl_plain
cp $R/plan_train_step.log $R/plan_train_step.json
step trace 90 $T configs/small.json --set device=cuda --set precision=bf16 --set attention=naive \
  --set bench.warmup_steps=1 --set bench.measure_steps=1 --set profile.trace=$R/trace.json \
  --set output.results=$R/trace_rec.json
# where the fused kernel's time goes (kernels/dw_adamw/NOTES.md "Next" 2): ncu of W13, warp states per SASS line
if [ $(left $L) -gt 100 ]; then
  step ncu 90 ncu --set full --import-source yes --kernel-name regex:dw_adamw_kernel --launch-skip 2 \
    --launch-count 1 -o $R/fused python3 $C --lib dwa/libdwa.so --no-check --rounds 1 --shapes xl --weights W13 \
    --variants fused --out $R/n
  ncu -i $R/fused.ncu-rep --page details > $R/details.log 2>&1
  ncu -i $R/fused.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip > $R/source.csv.gz
  rm -f $R/fused.ncu-rep; save
fi
if [ $(left $L) -gt 60 ]; then
  step racecheck $(( $(left $L) - 10 )) compute-sanitizer --tool racecheck python3 $C --lib dwa/libdwa.so --quick \
    --no-time --out $R/rc
fi
{
tail -2 $R/cuda_tests.log
grep -hE "failures" $R/check*.log
tail -13 $R/time.log
grep -hE "RACECHECK SUMMARY|ERROR SUMMARY" $R/racecheck.log 2>/dev/null
grep -hE "Duration|DRAM Throughput|No Eligible|Warp Cycles Per Issued" $R/details.log 2>/dev/null
for f in $R/small*.json $R/torch_small.json $R/xl_plain.json $R/xl_gemm.json $R/torch_xl.json; do
  [ -f $f ] && python3 -c "import json,sys; r=json.load(open(sys.argv[1])); t=r.get('timing',{}).get('step',{}); \
m=r.get('memory',{}); print(sys.argv[1].split('/')[-1], r.get('status'), t.get('median_ms'), t.get('mean_ms'), \
round((m.get('peak_bytes') or 0)/2**30, 2), (r.get('loss') or {}).get('per_step', [None])[-1] if isinstance(r.get('loss'), dict) else '')" $f
done
python3 - "$R" <<'PY'
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
for ph, rec in (("forward", "xl_forward"), ("forward_backward", "xl_forward_backward"), ("train_step", "xl_plain")):
    try:
        r = json.loads((R / f"{rec}.json").read_text()); p = json.loads((R / f"plan_{ph}.json").read_text())
    except Exception as e:
        print(ph, "missing:", e); continue
    m = r["memory"]
    print(f"{ph:17s} {r['status']} step {r['timing']['step']['mean_ms']:.2f} ms peak {m['peak_bytes']/2**30:.3f} GiB "
          f"planned {p['memory']['peak_bytes']/2**30:.3f} equal={m['peak_bytes'] == p['memory']['peak_bytes']} "
          f"grads {m['category_peaks'].get('gradients')} opt {m['category_peaks'].get('optimizer')}")
try:
    ev = [e for e in json.loads((R / "trace.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    names = {}
    for e in ev: names[e["name"]] = names.get(e["name"], 0) + 1
    subs = [n for n in names if n.startswith("attention ")]
    print("attention ranges:", {n: names[n] for n in sorted(names) if n.startswith("attention")})
    outer = [e for e in ev if e["name"].startswith("attention_")]
    inner = [e for e in ev if e["name"] in subs]
    nested = all(any(o.get("pid") == i.get("pid") and o["tid"] == i["tid"] and o["ts"] <= i["ts"] + 1e-3
                     and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 1e-3 for o in outer) for i in inner)
    print("sub-ranges nested in their attention range:", nested, len(inner))
except Exception as e:
    print("trace missing:", e)
PY
} > $R/summary.log 2>&1
finish
