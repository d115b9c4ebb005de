#!/usr/bin/env python3
"""Data-parallel summary table from trainer result records (DDP variants and ZeRO-1 on one or more GPUs).

    launch/ddp_table.py --one results/h200x2/xl_1gpu.json results/h200x2/xl_2gpu_*.json [--torch T.json ...]

For each record: strategy (bucket size), ranks, step mean ± std, forward/backward/optimizer, communication time and
the part of it exposed (the compute stream waiting), scaling efficiency = (1-GPU step) / (N-GPU step) at equal
per-GPU batch (--one gives the 1-GPU record), peak memory of the largest rank and optimizer state per rank.
torch_bench.py records (--torch) are listed with their step and peak. Standard library only.
"""
import argparse
import json
import pathlib
import sys

GIB = 2 ** 30


def ms(r, key):
    t = r.get("timing", {}).get(key)
    return t["mean_ms"] if t and t.get("mean_ms") is not None else None


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def is_train_record(r):
    return str(r.get("schema", "")).startswith("trainer.result/") and r.get("job") == "train" and \
        "parallel" in r.get("config", {})


def load(path, what):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"ddp_table: error: cannot read {what} '{path}': {e}")
    if not isinstance(r, dict):
        sys.exit(f"ddp_table: error: {what} '{path}' is not a JSON object (a trainer result record is)")
    return r


def per_gpu_rows(r):
    """Rows of the batch each rank processes per step (the global batch over the ranks)."""
    return r["config"]["data"]["batch_size"] // (r.get("world_size") or 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("records", nargs="+", help="trainer result records of job train")
    ap.add_argument("--one", help="the 1-GPU record at the same per-GPU batch (for scaling efficiency)")
    ap.add_argument("--torch", nargs="*", default=[], help="torch_bench.py records to list alongside")
    args = ap.parse_args()
    one = load(args.one, "--one record") if args.one else None
    if one is not None and (not is_train_record(one) or one.get("world_size", 1) != 1):
        sys.exit(f"ddp_table: error: --one '{args.one}' must be a 1-rank trainer train record")
    if one is not None and one.get("status") != "ok":
        sys.exit(f"ddp_table: error: --one '{args.one}' is a failed run (status {one.get('status')!r}: "
                 f"{one.get('error')})")
    base = ms(one, "step") if one else None
    rows = ([(pathlib.Path(args.one).stem, one)] if one else [])
    for p in args.records:
        r = load(p, "record")
        if not is_train_record(r):
            if str(r.get("schema", "")).startswith("torch_bench"):
                kind = "a torch_bench record (pass it with --torch)"
            elif not str(r.get("schema", "")).startswith("trainer.result/"):
                kind = "not a trainer result record (no trainer.result schema; a config file?)"
            else:
                kind = f"a record of job {r.get('job')!r}, not train"
            print(f"# skipped {p}: {kind}", file=sys.stderr)
            continue
        rows.append((pathlib.Path(p).stem, r))
    if not rows and not args.torch:
        sys.exit("ddp_table: error: no trainer train record among the inputs")
    w = max([len(n) for n, _ in rows] + [len("record")])
    print(f"{'record':{w}s} {'strategy':27s} {'ranks':>5s} {'step ms':>16s} {'fwd':>6s} {'bwd':>6s} {'opt':>6s} "
          f"{'comm':>6s} {'exposed':>7s} {'eff':>5s} {'peak GiB':>8s} {'opt GiB':>7s}")
    for label, r in rows:
        c = r["config"]
        name = c["parallel"]["strategy"]
        if name == "ddp_bucketed":
            name += f" {c['parallel']['bucket_mb']:g} MiB"
        if c["parallel"].get("reduce_dtype", "fp32") not in ("fp32", "f32"):
            name += f" ({c['parallel']['reduce_dtype']})"
        n = r.get("world_size") or 1
        if r.get("status") != "ok":
            print(f"{label:{w}s} {name:27s} {n:5d} {r.get('status')} ({r.get('error')})")
            continue
        step = r["timing"]["step"]
        if step.get("mean_ms") is None:
            print(f"{label:{w}s} {name:27s} {n:5d} (no measured steps)")
            continue
        peak = max([p["peak_bytes"] for p in r["memory"].get("per_rank", [])] or [r["memory"]["peak_bytes"]])
        eff = base / step["mean_ms"] if base and n > 1 else None
        if eff is not None and per_gpu_rows(r) != per_gpu_rows(one):
            print(f"# {label}: {per_gpu_rows(r)} rows per GPU, the --one record {per_gpu_rows(one)}: no efficiency",
                  file=sys.stderr)
            eff = None
        print(f"{label:{w}s} {name:27s} {n:5d} {step['mean_ms']:8.1f} ± {step['std_ms'] or 0:5.1f} "
              f"{fmt(ms(r, 'forward')):>6s} {fmt(ms(r, 'backward')):>6s} {fmt(ms(r, 'optimizer')):>6s} "
              f"{fmt(ms(r, 'comm')):>6s} {fmt(ms(r, 'comm_exposed')):>7s} {fmt(eff, '.3f'):>5s} {peak / GIB:8.2f} "
              f"{r['memory']['optimizer_state_bytes'] / GIB:7.2f}")
    for p in args.torch:
        t = load(p, "torch record")
        c = t.get("config", {})
        label = f"torch {c.get('mode')}" + (f" DDP {c.get('bucket_cap_mb')} MB" if c.get("world_size", 1) > 1 else "")
        if t.get("status") != "ok":
            print(f"{pathlib.Path(p).stem:{w}s} {label:20s} {c.get('world_size', 1):5d} {t.get('status')}")
            continue
        s = t["timing"]["step"]
        print(f"{pathlib.Path(p).stem:{w}s} {label:20s} {c.get('world_size', 1):5d} {s['mean_ms']:8.1f} ± "
              f"{s['std_ms']:5.1f} {'':>6s} {'':>6s} {'':>6s} {'':>6s} {'':>7s} {'':>5s} "
              f"{t['memory']['peak_bytes'] / GIB:8.2f}")


if __name__ == "__main__":
    main()
