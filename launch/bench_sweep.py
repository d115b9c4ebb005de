#!/usr/bin/env python3
"""Benchmark sweep (CS336 assignment 2, section 2.1.3): Table 1 sizes x precision x phase, one trainer run each.

    launch/bench_sweep.py --trainer build/trainer --out results/h200/sweep          # all sizes, fp32 and bf16
    launch/bench_sweep.py --sizes small xl --precisions bf16 --phases train_step
    launch/bench_sweep.py --warmups 0 1 2 5 --sizes small                             # the warm-up study
    launch/bench_sweep.py --handout --sizes small medium                            # the handout's setting

--handout runs the model as the handout's PyTorch benchmark does: naive attention in every precision, no activation
recompute (checkpointing.policy none), AdamW after the backward (optimizer.in_backward false) and no CUDA graph, so
forward, backward and the optimizer are timed apart and fp32 against bf16 changes only the precision. Without it the
runs use the trainer's fastest defaults (flash2 for bf16, selective recompute, AdamW inside the backward, a CUDA graph
of the step on the GPU: the phase columns then read '-' or ~0 for the optimizer).

Each configuration runs in its own process (an OOM, a crash, a refused config or a run past --timeout does not stop the
sweep: it is a row saying so) and writes its result record under --out; only a record this run wrote counts (a record
left there by an earlier sweep is never reported as this one's). Prints one table: mean ± std ms of the step, the mean
of its forward, backward and optimizer, tokens/s, TFLOP/s (3 digits), peak memory, the first measured step; writes
OUT/.sweep.json (atomically; a dot file, so that OUT/*.json are the records for plot.py and the tables). Exit status
1 when a run failed (an error or timeout row; an OOM row is a finding, not a failure), 2 for bad arguments
(`bench_sweep.py: error: ...`, before anything runs).
Ctrl-C (SIGINT) or SIGTERM (kill, Slurm), passed on to the run in flight (its process group: a trainer under a wrapper
script gets it too), lets that run end its record (status interrupted), runs nothing more, prints the rows so far and
writes OUT/.sweep.json; exit status 128 + the signal (130 for Ctrl-C, 143 for SIGTERM). Ctrl-Z stops the run in
flight with the sweep and fg / bg continue both (the time stopped does not count towards --timeout; the run's row
says it was stopped, since its step times include the pause; a multi-rank run stopped longer than its
parallel.comm_timeout_s may end with a collective timeout); a hangup ends both. Standard library only.
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

PROG = "bench_sweep.py"
SIZES = ["small", "medium", "large", "xl", "10B"]
PRECISIONS = ["fp32", "bf16", "bf16_pure"]
PHASES = ["forward", "forward_backward", "train_step"]
OWN_KEYS = {"precision": "use --precisions", "bench.phase": "use --phases", "bench.warmup_steps": "use --warmups",
            "bench.measure_steps": "use --steps", "output.results": "under --out", "name": "from the row",
            "model.preset": "use --sizes", "bench": "its keys: use the flags", "output": "its keys: under --out",
            "model": "the size: use --sizes"}
# Ctrl-C / SIGTERM: set by on_interrupt, which passes the signal on to the run in flight (`child`)
INTERRUPT = {"seen": 0, "child": None, "stopped_s": 0.0}  # stopped_s: time stopped by Ctrl-Z (on_stop)


def fail(msg):
    print(f"{PROG}: error: {msg}", file=sys.stderr)  # as argparse's own errors
    sys.exit(2)


def signal_run(p, signum):
    """`signum` to the run's process group: the trainer, and a wrapper's (--trainer a script) with it. The run is
    started in a group of its own, so only this sweep passes a terminal's Ctrl-C on to it, once, and a signal sent to
    the sweep alone (kill, Slurm) reaches the trainer under a wrapper too."""
    try:
        os.killpg(p.pid, signum)
    except ProcessLookupError:  # it has ended
        pass


def on_hangup(signum, frame):
    """The terminal closed (SIGHUP): the run in flight, in a process group of its own that the shell does not signal,
    gets it too; then the sweep ends by it as it would have without a handler."""
    if INTERRUPT["child"] is not None:
        signal_run(INTERRUPT["child"], signum)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def on_stop(signum, frame):
    """Ctrl-Z (SIGTSTP): the run in flight, in a process group of its own that the terminal does not stop, is stopped
    too (SIGSTOP), then the sweep stops as it would have without a handler; when the shell continues it (fg, bg), the
    run is continued with it."""
    child = INTERRUPT["child"]
    if child is not None:
        signal_run(child, signal.SIGSTOP)
    signal.signal(signum, signal.SIG_DFL)
    t = time.monotonic()
    os.kill(os.getpid(), signum)  # stops here until SIGCONT
    INTERRUPT["stopped_s"] += time.monotonic() - t
    signal.signal(signum, on_stop)
    if child is not None:
        signal_run(child, signal.SIGCONT)


def on_interrupt(signum, frame):
    """Ctrl-C: no more runs; the one in flight stops after its step and writes its record (status interrupted)."""
    INTERRUPT["seen"] = INTERRUPT["seen"] or signum
    if INTERRUPT["child"] is not None:
        signal_run(INTERRUPT["child"], signum)


def signame(n):
    try:
        return signal.Signals(n).name
    except ValueError:
        return "?"


def ended(returncode):
    """How a run's process ended, for a row whose record gives no reason."""
    if returncode < 0:
        return f"killed by signal {-returncode} ({signame(-returncode)})"
    if 128 < returncode < 128 + signal.NSIG:  # a wrapper (shell, timeout) whose child a signal ended
        return f"exit {returncode} (128 + {signame(returncode - 128)})"
    return f"exit {returncode}"


def error_line(text, default):
    """The trainer's own error line (the last 'trainer: error: ...' of its stderr, which a wrapper such as mpirun
    may follow with a banner of its own), else the last line."""
    lines = [s.strip() for s in (text or "").strip().splitlines() if s.strip()]
    ours = [s for s in lines if "trainer: error: " in s]
    return ours[-1] if ours else (lines[-1] if lines else default)


def first_line(text, default):
    lines = [s for s in (text or "").strip().splitlines() if s.strip()]
    return lines[0] if lines else default


def run_one(args, size, precision, phase, warmup):
    name = f"{size}_{precision}_{phase}_w{warmup}"
    out = pathlib.Path(args.out) / f"{name}.json"
    cmd = [args.trainer, f"{args.configs}/{size}.json", "--set", f"precision={precision}",
           "--set", f"bench.phase={phase}", "--set", f"bench.warmup_steps={warmup}",
           "--set", f"bench.measure_steps={args.steps}", "--set", f"output.results={out}", "--set", f"name={name}",
           "--set", "bench.log_every=0"]
    if args.handout:
        cmd += ["--set", "attention=naive", "--set", "checkpointing.policy=none", "--set",
                "optimizer.in_backward=false", "--set", "cuda_graph=false"]
    for kv in args.set or []:
        cmd += ["--set", kv]
    before = out.stat().st_mtime_ns if out.exists() else None
    row = (size, precision, phase, warmup)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, process_group=0)
    INTERRUPT["child"] = p
    if INTERRUPT["seen"]:  # Ctrl-C came while it was being started
        signal_run(p, INTERRUPT["seen"])
    stopped = INTERRUPT["stopped_s"]
    try:
        _, stderr = wait_run(p, args.timeout)  # on Ctrl-C too: its pipes stay read until it has ended
    except subprocess.TimeoutExpired:
        signal_run(p, signal.SIGTERM)  # the trainer stops at a step boundary and finishes its record
        try:
            _, stderr = wait_run(p, 30)
        except subprocess.TimeoutExpired:
            signal_run(p, signal.SIGKILL)
            _, stderr = p.communicate()
        return {"status": "timeout", "error": f"stopped after --timeout {args.timeout} s; its error line: "
                f"{error_line(stderr, '-')}", "_row": row}
    finally:
        INTERRUPT["child"] = None
        stopped = INTERRUPT["stopped_s"] - stopped
    fresh = out.exists() and out.stat().st_mtime_ns != before  # written (atomically) by this run
    r = None
    if fresh:
        try:
            r = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            r = {"status": "error", "error": f"unreadable record {out}: {e}"}
    if r is None:  # refused before any output (exit 2), or died without a record
        r = {"status": "error", "error": f"{ended(p.returncode)}: {error_line(stderr, 'no record, no message')}"}
    elif r.get("status") == "ok" and p.returncode != 0:
        r["status"] = "error"
        r["error"] = f"{ended(p.returncode)} after an ok record: {error_line(stderr, '-')}"
    elif r.get("status") != "ok" and not r.get("error"):  # killed mid-run: the record still says running
        r["error"] = f"{ended(p.returncode)}; record left {r.get('status')}"
    r["_row"] = row
    if stopped > 0:  # Ctrl-Z'd: its step times include the pause (the trainer's clocks went on)
        r["_stopped_s"] = round(stopped, 1)
    return r


def wait_run(p, seconds):
    """p.communicate() for up to `seconds`, not counting time the sweep spent stopped (Ctrl-Z); TimeoutExpired."""
    started, stopped = time.monotonic(), INTERRUPT["stopped_s"]
    while True:
        deadline = started + seconds + INTERRUPT["stopped_s"] - stopped
        try:
            return p.communicate(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            if started + seconds + INTERRUPT["stopped_s"] - stopped <= time.monotonic():
                raise


def fmt_bytes(n):
    """Bytes in the largest binary unit that keeps the number >= 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:7.2f} {unit}"
    return f"{n:7d} B  "


def num(x, spec, missing="-"):
    return format(x, spec) if isinstance(x, (int, float)) else format(missing, ">" + spec.split(".")[0].lstrip(">"))


# the columns of cell()'s rows, each '|' where theirs are
HEADER = "|".join([f"{'# size':7s} {'prec':9s} {'phase':17s} {'warm':>4s} ", f"{'step mean ± std':^24s}",
                   f"{'fwd ms':>9s}{'bwd ms':>9s}{'opt ms':>9s} ", f"{'tokens/s':^18s}", f"{'TFLOP/s':^17s}",
                   f"{'peak':^13s}", " first measured step"])


def cell(r):
    size, precision, phase, warmup = r["_row"]
    head = f"{size:7s} {precision:9s} {phase:17s} {warmup:4d}"
    timing = r.get("timing") or {}
    t = timing.get("step") or {}
    # an interrupted run that measured steps shows them (as plot.py and ddp_table.py do), marked
    measured = r.get("status") == "interrupted" and isinstance(t.get("mean_ms"), (int, float))
    if r.get("status") != "ok" and not measured:
        what = {"oom": "OOM", "timeout": "TIMEOUT", "interrupted": "INTERRUPTED"}.get(r.get("status"), "ERROR")
        return f"{head} | {what}: {first_line(str(r.get('error') or ''), '-')}"
    phase_ms = [(timing.get(k) or {}).get("mean_ms") for k in ("forward", "backward", "optimizer")]
    tp = r.get("throughput") or {}
    peak = (r.get("memory") or {}).get("peak_bytes")
    samples = t.get("samples") or []
    return (f"{head} | {num(t.get('mean_ms'), '9.2f')} ± {num(t.get('std_ms'), '7.2f')} ms | "
            f"{' '.join(num(x, '8.2f') for x in phase_ms)} | "
            f"{num(tp.get('tokens_per_s'), '10.0f')} tok/s | {num(tp.get('model_tflops_per_gpu'), '7.3g')} TFLOP/s | "
            f"{fmt_bytes(peak) if isinstance(peak, int) else '      -    '} | "
            f"first measured {num(samples[0] if samples else None, '.2f')} ms"
            + (f" | INTERRUPTED: {first_line(str(r.get('error') or ''), '-')}" if measured else "")
            + (f" | STOPPED {r['_stopped_s']} s by Ctrl-Z: its times include the pause" if r.get("_stopped_s") else ""))


def gpu_visible():
    """Whether nvidia-smi lists a GPU (the default precisions' bf16 runs on cuda only)."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0 and "GPU" in p.stdout


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", default="build/trainer")
    ap.add_argument("--configs", default="configs")
    ap.add_argument("--out", default="results/runs/sweep")
    ap.add_argument("--sizes", nargs="+", default=SIZES)
    ap.add_argument("--precisions", nargs="+", default=None,
                    help=f"any of {', '.join(PRECISIONS)} (default: fp32 bf16 where a GPU is visible, else fp32: bf16 "
                         "runs on cuda only)")
    ap.add_argument("--phases", nargs="+", default=PHASES)
    ap.add_argument("--warmups", nargs="+", type=int, default=[5])
    ap.add_argument("--steps", type=int, default=10, help="measured steps a run (>= 1)")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds a run may take (>= 1)")
    ap.add_argument("--set", action="append",
                    help="extra key=value passed to every run (not precision, bench.phase, bench.warmup_steps, "
                         "bench.measure_steps, output.results, name, model.preset, nor the whole bench, output or "
                         "model sections: the flags above set those, and label the rows)")
    ap.add_argument("--handout", action="store_true",
                    help="the handout's setting: naive attention, no recompute, AdamW after the backward, no CUDA "
                         "graph (see above); --set values given too come after and win")
    args = ap.parse_args()
    # bad arguments: one line, before anything runs or is written
    trainer = shutil.which(args.trainer) or (args.trainer if os.access(args.trainer, os.X_OK) else None)
    if not trainer or os.path.isdir(trainer):
        fail(f"--trainer '{args.trainer}' is not an executable (build it first: README.md)")
    if args.steps < 1:
        fail(f"--steps {args.steps}: at least 1 measured step")
    if args.timeout < 1:
        fail(f"--timeout {args.timeout}: at least 1 second")
    if any(w < 0 for w in args.warmups):
        fail(f"--warmups {args.warmups}: warm-up steps are >= 0")
    for kv in args.set or []:  # the keys each row is labelled by are the sweep's own
        key = kv.split("=", 1)[0].strip()
        if key in OWN_KEYS:
            fail(f"--set {kv}: the sweep sets {key} itself ({OWN_KEYS[key]}), and labels its rows by it")
    if args.precisions is None:
        args.precisions = ["fp32", "bf16"] if gpu_visible() else ["fp32"]
        if args.precisions == ["fp32"]:
            print(f"{PROG}: no GPU visible (nvidia-smi -L): --precisions fp32 (bf16 runs on cuda only; name it to "
                  "run it anyway)", file=sys.stderr, flush=True)
    for p in args.precisions:
        if p not in PRECISIONS:
            fail(f"--precisions: '{p}' is not one of {', '.join(PRECISIONS)}")
    for p in args.phases:
        if p not in PHASES:
            fail(f"--phases: '{p}' is not one of {', '.join(PHASES)}")
    for s in args.sizes:
        if not os.path.isfile(f"{args.configs}/{s}.json"):
            fail(f"--sizes: no config '{args.configs}/{s}.json'")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        fail(f"--out '{args.out}' exists and is not a directory")
    os.makedirs(args.out, exist_ok=True)
    rows = []
    t0 = time.time()
    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    if signal.getsignal(signal.SIGHUP) == signal.SIG_DFL:  # not under nohup (the runs inherit its SIG_IGN)
        signal.signal(signal.SIGHUP, on_hangup)
    if signal.getsignal(signal.SIGTSTP) == signal.SIG_DFL:
        signal.signal(signal.SIGTSTP, on_stop)
    runs = [(s, pr, ph, w) for s in args.sizes for pr in args.precisions for ph in args.phases for w in args.warmups]
    print(HEADER, flush=True)  # over the rows as they come (the table at the end repeats them)
    for run in runs:
        if INTERRUPT["seen"]:
            break
        r = run_one(args, *run)
        rows.append(r)
        print(cell(r), flush=True)
    if INTERRUPT["seen"]:
        print(f"{PROG}: interrupted ({signame(INTERRUPT['seen'])}): {len(rows)} of {len(runs)} runs started, the "
              f"rest skipped; the table below and {args.out}/.sweep.json hold those", file=sys.stderr, flush=True)
    summary = [{k: r.get(k) for k in ("_row", "status", "error", "timing", "throughput", "memory")} for r in rows]
    path = pathlib.Path(args.out) / ".sweep.json"
    tmp = path.with_name(f".sweep.json.tmp.{os.getpid()}")
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, path)
    print(f"\n# {len(rows)} runs in {time.time() - t0:.0f} s; records under {args.out}, the summary in {path}")
    print(HEADER)
    for r in rows:
        print(cell(r))
    if INTERRUPT["seen"]:
        return 128 + INTERRUPT["seen"]  # as the shell reports a process the signal ended (130: Ctrl-C)
    return 0 if all(r.get("status") in ("ok", "oom") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
