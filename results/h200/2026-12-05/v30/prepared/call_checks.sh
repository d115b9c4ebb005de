#!/bin/bash
# v30 checks (prepared in the 30th session, which had no device): the GPU side of v30's CPU-verified changes, ~4 min.
#   1. bench.phase forward / forward_backward / train_step of xl bf16: measured peak = --plan's, no gradient or
#      optimizer category in forward, no optimizer in forward_backward (AdamW::allocate_state, the inference path);
#   2. a traced small step with naive attention: the new sub-ranges ("attention scores QK^T", "attention softmax",
#      "attention PV", the backward's parts) nest inside "attention_fwd naive" / "attention_bwd naive";
#   3. --plan --fit of xl at context 32768 (the search, planner only: it needs no GPU but is cheap to keep here).
# Carry .dev: xz -T4 -c build-cuda/trainer > .dev/trainer.xz; cp this file .dev/checks.sh; run: bash .dev/checks.sh
source launch/device_call.sh "$0"
unpack_bins trainer
T=.dev/bin/trainer
XL="configs/xl.json --set device=cuda --set precision=bf16 --set bench.warmup_steps=2 --set bench.measure_steps=3"
for ph in forward forward_backward train_step; do
  step plan_$ph 60 $T --plan $XL --set bench.phase=$ph --json
  cp $R/plan_$ph.log $R/plan_$ph.json
  step xl_$ph 120 $T $XL --set bench.phase=$ph --set name=xl_$ph --set output.results=$R/xl_$ph.json
done
step trace 90 $T configs/small.json --set device=cuda --set precision=bf16 --set attention=naive \
  --set bench.warmup_steps=1 --set bench.measure_steps=1 --set profile.trace=$R/trace.json \
  --set output.results=$R/trace_rec.json
step fit 30 $T --plan configs/xl.json --set device=cuda --set precision=bf16 --set model.context_length=32768
python3 - "$R" <<'PY' | tee $R/summary.log
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
for ph in ("forward", "forward_backward", "train_step"):
    try:
        r = json.loads((R / f"xl_{ph}.json").read_text()); p = json.loads((R / f"plan_{ph}.json").read_text())
    except Exception as e:
        print(ph, "missing:", e); continue
    m = r["memory"]
    print(f"{ph:17s} {r['status']} step {r['timing']['step']['mean_ms']:.2f} ms peak {m['peak_bytes']/2**30:.3f} GiB "
          f"planned {p['memory']['peak_bytes']/2**30:.3f} equal={m['peak_bytes'] == p['memory']['peak_bytes']} "
          f"grads {m['category_peaks']['gradients']} opt {m['category_peaks']['optimizer']}")
try:
    ev = [e for e in json.loads((R / "trace.json").read_text())["traceEvents"] if e.get("ph") == "X"]
    names = {}
    for e in ev: names[e["name"]] = names.get(e["name"], 0) + 1
    subs = [n for n in names if n.startswith("attention ")]
    print("attention ranges:", {n: names[n] for n in sorted(names) if n.startswith("attention")})
    outer = [e for e in ev if e["name"].startswith("attention_") and e["tid"] == 0]
    inner = [e for e in ev if e["name"] in subs and e["tid"] == 0]
    nested = all(any(o["ts"] <= i["ts"] + 1e-3 and i["ts"] + i["dur"] <= o["ts"] + o["dur"] + 1e-3 for o in outer)
                 for i in inner)
    print("sub-ranges nested in their attention range:", nested, len(inner))
except Exception as e:
    print("trace missing:", e)
PY
tail -6 $R/fit.log
cat $R/progress.log
