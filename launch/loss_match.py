#!/usr/bin/env python3
"""Per-step loss agreement of trainer result records with a reference record (e.g. N-GPU strategies vs 1 GPU on the
same global batch).

    launch/loss_match.py REF.json A.json B.json ...

Prints, for each record, its strategy, the final loss, and the largest relative difference |a - ref| / |ref| over
all steps (and the step where it occurs). Exits 1 if a record has a different number of steps. Standard library only.
"""
import json
import pathlib
import sys


def losses(path):
    r = json.loads(pathlib.Path(path).read_text())
    return r, r["loss"]["per_step"]


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    ref_rec, ref = losses(argv[0])
    print(f"reference {argv[0]}: {len(ref)} steps, final loss {ref[-1]:.5f} "
          f"({ref_rec['config']['precision']}, {ref_rec['config']['parallel']['strategy']})")
    print(f"{'record':44s} {'strategy':14s} {'final':>9s} {'max rel diff':>13s} {'at step':>7s}")
    status = 0
    for p in argv[1:]:
        rec, l = losses(p)
        if len(l) != len(ref):
            print(f"{p}: {len(l)} steps, reference has {len(ref)}")
            status = 1
            continue
        rel = [abs(a - b) / abs(b) for a, b in zip(l, ref)]
        k = max(range(len(rel)), key=rel.__getitem__)
        print(f"{pathlib.Path(p).name:44s} {rec['config']['parallel']['strategy']:14s} {l[-1]:9.5f} {rel[k]:13.2e} "
              f"{k:7d}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
