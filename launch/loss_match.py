#!/usr/bin/env python3
"""Per-step loss agreement of trainer result records with a reference record (e.g. N-GPU strategies vs 1 GPU on the
same global batch).

    launch/loss_match.py REF.json A.json B.json ...

Prints, for each record, its strategy, the final loss, and the largest relative difference |a - ref| / |ref| over
all steps (and the step where it occurs, numbered from 1 as in the trainer's log). An interrupted run's losses are
valid: a record or reference with status interrupted is compared on the steps both have, its row saying how many
when the two differ in length. Exit codes: 0 when every record compared; 1 if a record (the reference included)
failed (status error, oom, running, ...), or a record other than the reference has no per-step losses or, neither
of the two interrupted, a different number of steps (a row says which); 2 on bad input, one line
"loss_match: error: ..." on stderr before anything is printed: a file that cannot be read or is not a JSON object, a
reference without per-step losses, a record to compare without its config section, or per-step losses that are not
numbers. A strategy a
record lacks shows as "-". Standard library only.
"""
import json
import math
import pathlib
import sys


def die(msg):
    print(f"loss_match: error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"cannot read '{path}': {e}")
    if not isinstance(r, dict):
        die(f"'{path}' is not a JSON object (a trainer result record is)")
    return r, section(r, "loss").get("per_step")


def failure(path, r):
    """Why record `r` (read from `path`) is not a finished run, naming the file, or None when it is one (or an
    interrupted one: its losses are valid). A record whose status is "running" carries no error: its run has not
    ended, or was killed before it wrote its end."""
    status = r.get("status")
    if status in (None, "ok", "interrupted"):
        return None
    if status == "running":
        return (f"'{path}' is not a finished run (status running: the run has not ended, or was killed before it "
                f"wrote its record; pid {r.get('pid', '?')}, started {r.get('started', '?')})")
    return f"'{path}' is a failed run (status {status}: {r.get('error') or 'no error message in the record'})"


def check(path, r, losses):
    """Dies (exit 2) when a finished record with per-step losses lacks what the comparison reads: its config
    section, or per-step losses that are all numbers."""
    if not isinstance(r.get("config"), dict):
        die(f"'{path}': 'config' is {'null' if 'config' in r else 'missing'} (a hand-edited or partial record?): "
            "cannot tell whether its run is comparable")
    if (not isinstance(losses, list) or
                   not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in losses)):
        die(f"'{path}': loss.per_step is not a list of numbers")


def section(d, key):
    """d[key] when it is an object, else {} (a section missing or null)."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else {}


def strategy(r):
    return str(section(section(r, "config"), "parallel").get("strategy") or "-")


def setup(r):
    """What must agree for curves to be comparable: precision, schedule, lr, warm-up, model dims, global batch, data
    (source, file, sampling, seed) and the initial weights' seed."""
    c = section(r, "config")
    o = section(c, "optimizer")
    d = section(c, "data")
    dims = section(section(r, "model"), "dims")
    return (c.get("precision"), o.get("schedule"), o.get("lr"), o.get("warmup_steps"),
            tuple(sorted(dims.items())), d.get("batch_size"),
            (d.get("source"), d.get("path"), d.get("sampling"), d.get("seed")), section(c, "init").get("seed"))


def rel_diff(a, ref):
    if ref:
        return abs(a - ref) / abs(ref)
    return 0.0 if a == ref else math.inf


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    # Every file is read and checked before anything is printed: bad input is one line on stderr and exit 2.
    ref_rec, ref = load(argv[0])
    if why := failure(argv[0], ref_rec):
        print(f"loss_match: error: the reference {why}", file=sys.stderr)
        return 1
    if not ref:
        die(f"'{argv[0]}' has no per-step losses ("
            + ("interrupted before its first step)" if ref_rec.get("status") == "interrupted" else
               "not a trainer train record?)"))
    check(argv[0], ref_rec, ref)
    records = []
    for path in argv[1:]:
        rec, l = load(path)
        if l and not failure(path, rec):  # (without losses it is a row that says so)
            check(path, rec, l)
        records.append((path, rec, l))
    p, sch, lr, wu = ("-" if x is None else x for x in setup(ref_rec)[:4])
    cut = " (interrupted)" if ref_rec.get("status") == "interrupted" else ""
    print(f"reference {argv[0]}: {len(ref)} steps{cut}, final loss {ref[-1]:.5f} ({p}, schedule {sch}, lr {lr}, "
          f"warm-up {wu}, strategy {strategy(ref_rec)})")
    print(f"{'record':44s} {'strategy':14s} {'final':>9s} {'max rel diff':>13s} {'at step':>7s}")
    status = 0
    for path, rec, l in records:
        if why := failure(path, rec):
            print(f"{pathlib.Path(path).name:44s} {why}")
            status = 1
            continue
        if not l:
            print(f"{pathlib.Path(path).name:44s} no per-step losses ("
                  + ("interrupted before its first step)" if rec.get("status") == "interrupted" else
                     "not a trainer train record?)"))
            status = 1
            continue
        interrupted = "interrupted" in (rec.get("status"), ref_rec.get("status"))
        if len(l) != len(ref) and not interrupted:
            print(f"{pathlib.Path(path).name:44s} {len(l)} steps, the reference has {len(ref)}")
            status = 1
            continue
        rel = [rel_diff(a, b) for a, b in zip(l, ref)]  # an interrupted run's: the steps both have
        k = max(range(len(rel)), key=rel.__getitem__)
        names = ("precision", "schedule", "lr", "warm-up", "model", "global batch", "data", "init seed")
        differ = [n for n, a, b in zip(names, setup(rec), setup(ref_rec)) if a != b]
        note = f"  (not comparable: different {', '.join(differ)})" if differ else ""
        if len(l) != len(ref):
            note += (f"  ({'interrupted: ' if rec.get('status') == 'interrupted' else ''}compared the first "
                     f"{len(rel)} steps; it has {len(l)}, the reference {len(ref)})")
        print(f"{pathlib.Path(path).name:44s} {strategy(rec):14s} {l[-1]:9.5f} {rel[k]:13.2e} {k + 1:7d}{note}")
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
