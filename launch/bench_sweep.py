#!/usr/bin/env python3
"""Benchmark sweep (CS336 assignment 2, section 2.1.3): Table 1 sizes x precision x phase, one trainer run each.

    launch/bench_sweep.py --trainer build/trainer --out results/h200/sweep          # all sizes, fp32 and bf16
    launch/bench_sweep.py --sizes small xl --precisions bf16 --phases train_step
    launch/bench_sweep.py --warmups 0 1 2 5 --sizes small                             # the warm-up study

Each configuration runs in its own process (an OOM or a crash does not stop the sweep) and writes its result record
under --out; a size that does not fit is an OOM row. Prints one table: mean ± std ms, tokens/s, TFLOP/s, peak GiB.
Standard library only.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

SIZES = ["small", "medium", "large", "xl", "10B"]
PHASES = ["forward", "forward_backward", "train_step"]


def run_one(args, size, precision, phase, warmup):
    name = f"{size}_{precision}_{phase}_w{warmup}"
    out = pathlib.Path(args.out) / f"{name}.json"
    cmd = [args.trainer, f"{args.configs}/{size}.json", "--set", f"precision={precision}", "--set", f"bench.phase={phase}",
           "--set", f"bench.warmup_steps={warmup}", "--set", f"bench.measure_steps={args.steps}",
           "--set", f"output.results={out}", "--set", f"name={name}", "--set", "bench.log_every=0"]
    for kv in args.set or []:
        cmd += ["--set", kv]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.exists():
        r = json.loads(out.read_text())
    else:
        r = {"status": "error", "error": (p.stderr.strip().splitlines() or ["no record"])[-1]}
    r["_row"] = (size, precision, phase, warmup)
    return r


def cell(r):
    size, precision, phase, warmup = r["_row"]
    head = f"{size:7s} {precision:5s} {phase:17s} {warmup:3d}"
    if r.get("status") != "ok":
        what = "OOM" if r.get("status") == "oom" else "ERROR"
        return f"{head} | {what}: {str(r.get('error'))[:90]}"
    t = r["timing"]["step"]
    tp = r["throughput"]
    return (f"{head} | {t['mean_ms']:9.2f} ± {t['std_ms']:7.2f} ms | {tp['tokens_per_s']:10.0f} tok/s | "
            f"{tp['model_tflops_per_gpu']:7.1f} TFLOP/s | {r['memory']['peak_bytes'] / 2**30:7.2f} GiB | "
            f"first step {t['samples'][0]:.2f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default="build/trainer")
    ap.add_argument("--configs", default="configs")
    ap.add_argument("--out", default="results/runs/sweep")
    ap.add_argument("--sizes", nargs="+", default=SIZES)
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    ap.add_argument("--phases", nargs="+", default=PHASES)
    ap.add_argument("--warmups", nargs="+", type=int, default=[5])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=1200)
    ap.add_argument("--set", action="append", help="extra key=value passed to every run")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for size in args.sizes:
        for precision in args.precisions:
            for phase in args.phases:
                for warmup in args.warmups:
                    r = run_one(args, size, precision, phase, warmup)
                    rows.append(r)
                    print(cell(r), flush=True)
    summary = [{k: r.get(k) for k in ("_row", "status", "error", "timing", "throughput", "memory")} for r in rows]
    (pathlib.Path(args.out) / "sweep.json").write_text(json.dumps(summary, indent=1))
    print("\n# size    prec  phase             warm |   step mean ± std     |  tokens/s   |  TFLOP/s  |  peak  |")
    for r in rows:
        print(cell(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
