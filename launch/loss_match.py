#!/usr/bin/env python3
"""Per-step loss agreement of trainer result records with a reference record (e.g. N-GPU strategies vs 1 GPU on the
same global batch).

    launch/loss_match.py REF.json A.json B.json ...

Prints, for each record, its strategy, the final loss, and the largest relative difference |a - ref| / |ref| over
all steps (and the step where it occurs, numbered from 1 as in the trainer's log). Exits 1 if a record failed,
has no per-step losses or has a different number of steps. Standard library only.
"""
import json
import pathlib
import sys


def load(path):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"loss_match: error: cannot read '{path}': {e}")
    per_step = (r.get("loss") or {}).get("per_step") if isinstance(r, dict) else None
    return r, per_step


def failure(path, r):
    """Why record `r` (read from `path`) is not a finished run, naming the file, or None when it is one. A record
    whose status is "running" carries no error: its run has not ended, or was killed before it wrote its end."""
    status = r.get("status") if isinstance(r, dict) else None
    if status in (None, "ok"):
        return None
    if status == "running":
        return (f"'{path}' is not a finished run (status running: the run has not ended, or was killed before it "
                f"wrote its record; pid {r.get('pid', '?')}, started {r.get('started', '?')})")
    return f"'{path}' is a failed run (status {status}: {r.get('error') or 'no error message in the record'})"


def setup(r):
    """What must agree for curves to be comparable: precision, schedule, lr, warm-up, model dims, global batch, data
    (source, file, sampling, seed) and the initial weights' seed."""
    c = r.get("config", {})
    o = c.get("optimizer", {})
    d = c.get("data") or {}
    dims = (r.get("model") or {}).get("dims") or {}
    return (c.get("precision"), o.get("schedule"), o.get("lr"), o.get("warmup_steps"),
            tuple(sorted(dims.items())), d.get("batch_size"),
            (d.get("source"), d.get("path"), d.get("sampling"), d.get("seed")), (c.get("init") or {}).get("seed"))


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    ref_rec, ref = load(argv[0])
    if why := failure(argv[0], ref_rec):
        sys.exit(f"loss_match: error: the reference {why}")
    if not ref:
        sys.exit(f"loss_match: error: '{argv[0]}' has no per-step losses (not a trainer train record?)")
    p, sch, lr, wu = setup(ref_rec)[:4]
    print(f"reference {argv[0]}: {len(ref)} steps, final loss {ref[-1]:.5f} ({p}, schedule {sch}, lr {lr}, "
          f"warm-up {wu}, strategy {ref_rec['config']['parallel']['strategy']})")
    print(f"{'record':44s} {'strategy':14s} {'final':>9s} {'max rel diff':>13s} {'at step':>7s}")
    status = 0
    for path in argv[1:]:
        rec, l = load(path)
        if why := failure(path, rec):
            print(f"{pathlib.Path(path).name:44s} {why}")
            status = 1
            continue
        if not l:
            print(f"{pathlib.Path(path).name:44s} no per-step losses (not a trainer train record?)")
            status = 1
            continue
        if len(l) != len(ref):
            print(f"{pathlib.Path(path).name:44s} {len(l)} steps, the reference has {len(ref)}")
            status = 1
            continue
        rel = [abs(a - b) / abs(b) for a, b in zip(l, ref)]
        k = max(range(len(rel)), key=rel.__getitem__)
        names = ("precision", "schedule", "lr", "warm-up", "model", "global batch", "data", "init seed")
        differ = [n for n, a, b in zip(names, setup(rec), setup(ref_rec)) if a != b]
        note = f"  (not comparable: different {', '.join(differ)})" if differ else ""
        print(f"{pathlib.Path(path).name:44s} {rec['config']['parallel']['strategy']:14s} {l[-1]:9.5f} "
              f"{rel[k]:13.2e} {k + 1:7d}{note}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
