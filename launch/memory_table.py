#!/usr/bin/env python3
"""Tabulate train records side by side with the planner's prediction: step time, measured and predicted peak memory,
their ratio, the head and activation categories, and the checkpointing policy (CS336 a2 section 3's tables).

    launch/memory_table.py results/h200/2026-12-02/v8_memory/*.json
    launch/memory_table.py --markdown RECORDS...          # a Markdown table for results/README.md

Records of PyTorch's peer (launch/torch_bench.py --json) are accepted too (no prediction); memory timelines and
records of the benchmark jobs (attention_bench, collective_bench) are skipped with a note. An out-of-memory record's
planned peak comes from the plan it carries. Sizes are GiB, or MiB when every one is below 1 GiB. Rows are named by
file name, with as many parent folders as make the names unique where two files share one (r1/run, r2/run; the same
file twice keeps its name). Bad input (a file that cannot be read, is not a result record, or holds a value of another
type where the table reads a number or a section: a hand-edited record) is one line "memory_table.py: error: ..." on
stderr and exit code 2. Standard library only.
"""
import argparse
import json
import pathlib
import sys

from records import file_labels, size_unit  # this folder: the records helpers


def die(msg):
    print(f"memory_table.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def field(path, r, dotted, number=False):
    """r's value at the dotted key (a.b.c), None where a level is missing or null; dies naming the file and the key
    where a level is not an object, or (number) the value is not a number (a hand-edited record)."""
    v = r
    for n, k in enumerate(dotted.split(".")):
        if not isinstance(v, dict):
            die(f"{path}: {'.'.join(dotted.split('.')[:n])} is {json.dumps(v)[:40]}, not an object")
        v = v.get(k)
        if v is None:
            return None
    if number and (not isinstance(v, (int, float)) or isinstance(v, bool)):
        die(f"{path}: {dotted} is {json.dumps(v)[:40]}, not a number")
    return v


def row(path):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
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
    f = lambda dotted, number=False: field(path, r, dotted, number)
    out = {"path": str(path), "status": str(r.get("status") or "?")}
    if not str(r.get("schema", "")).startswith("trainer.result"):  # torch_bench record
        out.update(kind="torch", ctx=f("config.ctx"),
                   policy=f"torch {f('config.mode')} ckpt={f('config.checkpoint') or 'none'}",
                   step=f("timing.step.mean_ms", True),
                   peak=f("memory.peak_bytes", True) or f("peak_bytes", True))
        return out
    pol = str(f("config.checkpointing.policy") or "?")
    if pol == "every_k":
        pol += f" k={f('config.checkpointing.k')}"
    blocks = f("config.checkpointing.blocks")
    if blocks is not None:
        pol += f" blocks={len(blocks) if isinstance(blocks, list) else blocks}"
    # an out-of-memory record carries its whole plan instead of memory.predicted
    pred = f("memory.predicted.peak_bytes", True) or f("plan.memory.peak_bytes", True)
    out.update(kind="trainer", ctx=f("config.model.context_length"), policy=pol, step=f("timing.step.mean_ms", True),
               peak=f("memory.peak_bytes", True), pred=pred, head=f("memory.by_category.head", True),
               acts=f("memory.by_category.activations", True))
    return out


def fmt(x, scale=1.0, digits=2):
    return "-" if x is None else f"{x / scale:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    rows = [r for r in (row(p) for p in a.records) if r is not None]
    for r, name in zip(rows, file_labels([r["path"] for r in rows])):  # r1/run, r2/run where two share a name
        r["name"] = name
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
            print("| " + " | ".join(c.replace("|", "\\|") for c in l) + " |")  # a name with | in it
    else:
        w = [max(len(h), *(len(l[i]) for l in lines)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
        for l in lines:
            print("  ".join(c.ljust(w[i]) for i, c in enumerate(l)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
