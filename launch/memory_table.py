#!/usr/bin/env python3
"""Tabulate train records side by side with the planner's prediction: step time, measured and predicted peak memory,
their ratio, the head and activation categories, and the checkpointing policy (CS336 a2 section 3's tables).

    launch/memory_table.py results/h200/2026-12-01/v8_memory/*.json
    launch/memory_table.py --markdown RECORDS...          # a Markdown table for results/README.md

Records of PyTorch's peer (launch/torch_bench.py --json) are accepted too (no prediction); memory timelines and
records of the benchmark jobs (attention_bench, collective_bench) are skipped with a note. An out-of-memory record's
planned peak comes from the plan it carries. Sizes are GiB, or MiB when every one is below 1 GiB. Standard library
only.
"""
import argparse
import json
import pathlib
import sys

from records import size_unit  # this folder: the records helpers


def die(msg):
    print(f"memory_table.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def row(path):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        die(f"{path}: {e}")
    if isinstance(r, list):  # a torch_bench sweep file
        r = r[0] if r else {}
    if not isinstance(r, dict) or not str(r.get("schema", "")).startswith(("trainer.", "torch_bench.")):
        die(f"{path}: not a trainer or torch_bench result record")
    if str(r.get("schema", "")).startswith("trainer.memory_timeline"):
        print(f"memory_table.py: {path}: a memory timeline, skipped", file=sys.stderr)
        return None
    if str(r.get("schema", "")).startswith("trainer.result") and r.get("job", "train") != "train":
        print(f"memory_table.py: {path}: a record of job {r.get('job')!r}, skipped", file=sys.stderr)
        return None
    out = {"name": pathlib.Path(path).stem, "status": r.get("status") or "?"}
    if not str(r.get("schema", "")).startswith("trainer.result"):  # torch_bench record
        c = r.get("config") or {}
        out.update(kind="torch", ctx=c.get("ctx"), policy=f"torch {c.get('mode')} ckpt={c.get('checkpoint', 'none')}",
                   step=((r.get("timing") or {}).get("step") or {}).get("mean_ms"),
                   peak=(r.get("memory") or {}).get("peak_bytes") or r.get("peak_bytes"))
        return out
    cfg = r.get("config") or {}
    ck = cfg.get("checkpointing") or {}
    pol = ck.get("policy", "?")
    if pol == "every_k":
        pol += f" k={ck.get('k')}"
    if ck.get("blocks") is not None:
        pol += f" blocks={len(ck['blocks'])}"
    mem = r.get("memory") or {}
    pred = dict(mem.get("predicted") or {})
    if not pred.get("peak_bytes"):  # an out-of-memory record carries its whole plan instead
        pred["peak_bytes"] = ((r.get("plan") or {}).get("memory") or {}).get("peak_bytes")
    step = ((r.get("timing") or {}).get("step") or {}).get("mean_ms")
    out.update(kind="trainer", ctx=(cfg.get("model") or {}).get("context_length"), policy=pol, step=step,
               peak=mem.get("peak_bytes"), pred=pred.get("peak_bytes"),
               head=(mem.get("by_category") or {}).get("head"), acts=(mem.get("by_category") or {}).get("activations"),
               peak_phase=pred.get("peak_phase"), strategy=(cfg.get("parallel") or {}).get("strategy"),
               layers=(cfg.get("model") or {}).get("num_layers"), batch=(cfg.get("data") or {}).get("batch_size"),
               pred_time=((r.get("plan") or {}).get("time_s")))
    return out


def fmt(x, scale=1.0, digits=2):
    return "-" if x is None else f"{x / scale:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    rows = [r for r in (row(p) for p in a.records) if r is not None]
    if not rows:
        print("memory_table.py: error: no result records among the files (memory timelines are skipped)",
              file=sys.stderr)
        return 2
    sizes = [r.get(k) for r in rows for k in ("peak", "pred") if isinstance(r.get(k), (int, float))]
    unit, scale = size_unit(sizes)
    head = ["record", "status", "ctx", "policy", "step ms", f"peak {unit}", f"planned {unit}", "planned/measured",
            f"activations {unit}", f"head {unit}"]
    lines = []
    for r in rows:
        ratio = (r["pred"] / r["peak"]) if r.get("pred") and r.get("peak") else None
        lines.append([r["name"], r["status"], str(r.get("ctx") or "-"), r.get("policy", "-"), fmt(r.get("step"), 1, 1),
                      fmt(r.get("peak"), scale), fmt(r.get("pred"), scale), fmt(ratio, 1, 3), fmt(r.get("acts"), scale),
                      fmt(r.get("head"), scale, 3)])
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        w = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for l in lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
