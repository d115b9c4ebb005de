#!/usr/bin/env python3
"""Draws trainer result records (the JSON of output.results, job train) as PNG.

    launch/plot.py loss    results/runs/a.json results/runs/b.json -o loss.png
    launch/plot.py sweep   'results/h200/2026-11-30/sweep/*_w5.json' -o sweep.png [--mfu]
    launch/plot.py comm    results/h200x2/2026-11-30/v1/xl_*.json -o comm.png
    launch/plot.py phases  results/h200/2026-12-02/v8_memory/xl_c2048_*.json -o phases.png
    launch/plot.py memory  results/h200/2026-12-02/v8_memory/*.json -o memory.png

Kinds (the first argument; `--kind KIND` also works):
  loss    the loss of every step (loss.per_step, warm-up steps included) of several runs on one axes; a resumed
          run's steps at their numbers (from steps.first + 1)
  sweep   step time (log scale) and model TFLOP/s per GPU (--mfu: MFU) against the parameter count (log scale),
          one line per precision (and bench.phase where the records differ in it); out-of-memory runs are listed
  comm    one horizontal bar per record, the step split into compute with no collective in flight, compute
          overlapped with communication (timing.comm - comm_exposed) and exposed communication (the compute stream
          stalled, timing.comm_exposed); a 1-rank record is all compute
  phases  one horizontal bar per record: forward, backward (incl. the gradient communication of finish_backward),
          optimizer and the rest of the step (timing.step - their sum), mean ms
  memory  one horizontal bar per record: the peak (memory.peak_bytes) split by category at the peak
          (memory.by_category), GiB, with the planner's prediction (memory.predicted.peak_bytes) as a black tick

Inputs are files or quoted globs (expanded here, sorted). Labels are the file names without .json (with as many parent
folders as make them unique) unless --labels gives them. A run that failed (status oom / error) has no timings: the bar
kinds and sweep list it in a note; loss draws the steps it has. --dump-json PATH writes what was drawn, read back
from the figure's artists (lines: x, y; bars: one value per record and segment) for tests and scripts.

Figures are 1100 px wide (10 in at 110 dpi): loss 605 px high, sweep 550, the bar kinds 110 x max(3, 1.6 + 0.34 x
records) px.

Exit codes: 0 ok, 2 bad input (a missing or unreadable file, not a trainer result record of job train, a record
without the fields the kind needs, nothing left to draw), with one line `plot.py: error: ...` on stderr.
Needs matplotlib (Debian's python3-matplotlib; Agg: no display).
"""
from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_common import COLORS, DPI, BadInput, check_output, pyplot, save_figure  # noqa: E402

PROG = "plot.py"
KINDS = ("loss", "sweep", "comm", "phases", "memory")
GIB = 2 ** 30
WIDTH_IN = 10.0   # every figure is 10 inches (1100 px) wide; loss 5.5 in high, sweep 5, the bar kinds by bar count
PHASE_COLORS = {"forward": "#4c72b0", "backward": "#dd8452", "optimizer": "#55a868", "other": "#b0b0b0"}
COMM_COLORS = {"compute": "#4c72b0", "overlapped": "#8fb0d9", "exposed": "#c44e52"}


# ---- records --------------------------------------------------------------------------------------------------------

def expand(inputs: list[str]) -> list[str]:
    """Files in the order given; an argument with *?[ that is not a file is a glob, expanded and sorted."""
    paths = []
    for a in inputs:
        if any(c in a for c in "*?[") and not Path(a).exists():
            hits = sorted(glob.glob(a, recursive=True))
            if not hits:
                raise BadInput(f"no file matches '{a}'")
            paths += hits
        else:
            paths.append(a)
    return paths


def load(path: str) -> dict:
    """The record at `path`, checked to be a trainer result record of job train."""
    try:
        r = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"'{path}' does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"'{path}' is a directory; give record files (or a quoted glob such as '{path}/*.json')") \
            from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read '{path}': {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"'{path}' is not JSON ({e})") from None
    schema = r.get("schema") if isinstance(r, dict) else None
    if not str(schema).startswith("trainer.result/"):
        got = repr(schema) if isinstance(r, dict) else f"a JSON {type(r).__name__}"
        raise BadInput(f"'{path}' is not a trainer result record (schema {got}, expected 'trainer.result/1'; "
                       f"written by trainer's output.results)")
    if r.get("job") != "train":
        raise BadInput(f"'{path}' is a record of job {r.get('job')!r}; plot.py draws records of job train")
    return r


def field(r: dict, dotted: str, path: str, allow_null=False):
    """r's value at a dotted key; BadInput naming the file and the key when it is missing (or null)."""
    v = r
    for k in dotted.split("."):
        v = v.get(k) if isinstance(v, dict) else None
        if v is None:
            break
    if v is None and not allow_null:
        raise BadInput(f"'{path}' has no {dotted} (status {r.get('status')!r}; a record of an older trainer?); "
                       f"the kind drawn needs it")
    return v


def mean_ms(r, phase, path):
    """timing.<phase>.mean_ms, 0 for a phase the run did not have (null: e.g. no backward in a forward bench)."""
    t = field(r, f"timing.{phase}", path)
    return float(t["mean_ms"]) if isinstance(t, dict) and t.get("mean_ms") is not None else 0.0


def default_labels(paths: list[str]) -> list[str]:
    """File names without .json, with as many parent folders as make them unique."""
    parts = [Path(p).resolve().with_suffix("").parts for p in paths]
    for n in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-n:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


# ---- kinds: each draws on a new figure and returns it with its notes ----------------------------------------------

def bar_figure_height(n_bars: int) -> float:
    """Inches: 0.34 per bar and 1.6 for the title and axis, at least 3 (room for the legend)."""
    return max(3.0, 1.6 + 0.34 * n_bars)


def barh_figure(n_bars: int, n_panels: int = 1):
    plt = pyplot()
    height = bar_figure_height(n_bars)
    fig, axes = plt.subplots(1, n_panels, figsize=(WIDTH_IN, height), dpi=DPI, squeeze=False)
    return fig, axes[0]


def stacked_barh(ax, labels, segments, colors, unit):
    """Horizontal stacked bars, the first record on top: segments = [(name, [value per record])]."""
    ys = list(range(len(labels)))[::-1]
    left = [0.0] * len(labels)
    for name, values in segments:
        if any(v > 0 for v in values):
            ax.barh(ys, values, left=left, color=colors.get(name), label=name, height=0.7)
        left = [a + b for a, b in zip(left, values)]
    for y, total in zip(ys, left):
        ax.text(total, y, f" {total:.1f}" if total < 1000 else f" {total:.0f}", va="center", fontsize=8)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlim(0, max(left + [1e-9]) * 1.15)
    ax.set_xlabel(unit)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)


def legend_right(ax, *handles_labels):
    """The legend outside the axes, on the right (as plot_memory.py's), so that it never hides a bar."""
    ax.legend(*handles_labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def ok_records(recs, notes, what):
    """The records with status ok; the others go to the notes."""
    keep = []
    for label, path, r in recs:
        if r.get("status") == "ok":
            keep.append((label, path, r))
        else:
            notes.append(f"{label}: status {r.get('status')} ({str(r.get('error'))[:80]}): no {what}")
    if not keep:
        raise BadInput(f"no record with status ok among the inputs: nothing to draw ({'; '.join(notes)})")
    return keep


def draw_loss(recs, args):
    notes, drawn = [], []
    for label, path, r in recs:
        losses = field(r, "loss.per_step", path, allow_null=True)
        if not losses:
            if r.get("status") == "ok":
                raise BadInput(f"'{path}' has no loss.per_step (a record of an older trainer?); the loss kind "
                               f"needs the loss of every step")
            notes.append(f"{label}: status {r.get('status')}, no losses")
            continue
        if not all(isinstance(x, (int, float)) or x is None for x in losses):
            raise BadInput(f"'{path}': loss.per_step holds something other than numbers")
        # A resumed run's record holds the steps from steps.first on (its checkpoint's step): drawn at their numbers.
        first = (r.get("steps") or {}).get("first") or 0
        if not isinstance(first, int) or first < 0:
            raise BadInput(f"'{path}': steps.first is {first!r}, not a step number")
        drawn.append((label if r.get("status") == "ok" else f"{label} ({r.get('status')})", losses, first))
    if not drawn:
        raise BadInput(f"no record with losses among the inputs ({'; '.join(notes)})")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.5), dpi=DPI)
    for label, losses, first in drawn:
        xs = [first + i + 1 for i, v in enumerate(losses) if v is not None]
        ax.plot(xs, [v for v in losses if v is not None], marker="o" if len(xs) <= 30 else None, markersize=3,
                linewidth=1.2, label=label)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step (warm-up steps included)")
    ax.set_ylabel("loss (mean over the global batch)")
    if args.logy:
        ax.set_yscale("log")
    ax.grid(color="#dddddd", linewidth=0.6)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(args.title or "loss per step")
    return fig, notes


def size_name(r):
    return (r.get("model") or {}).get("preset") or r["config"]["model"].get("preset") or r.get("name") or "?"


def draw_sweep(recs, args):
    notes = []
    phases = {field(r, "config.bench.phase", p) for _, p, r in recs}
    series = {}   # (precision, phase) -> [(params, name, step ms, rate)]
    for label, path, r in recs:
        key = (field(r, "config.precision", path), field(r, "config.bench.phase", path))
        name = " ".join(key) if len(phases) > 1 else key[0]
        if r.get("status") != "ok":
            notes.append(f"{size_name(r)} {name}: {r.get('status')}")
            continue
        params = float(field(r, "model.parameters", path))
        step = float(field(r, "timing.step.mean_ms", path))
        rate = float(field(r, "throughput.mfu" if args.mfu else "throughput.model_tflops_per_gpu", path))
        series.setdefault(name, []).append((params, size_name(r), step, rate * (100 if args.mfu else 1)))
    if not series:
        raise BadInput(f"no record with status ok among the inputs: nothing to draw ({'; '.join(notes)})")
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(WIDTH_IN, 5.0), dpi=DPI)
    ticks = {}
    for name, pts in sorted(series.items()):
        pts.sort()
        xs = [p[0] / 1e9 for p in pts]
        for p in pts:
            ticks[p[0] / 1e9] = p[1]
        a1.plot(xs, [p[2] for p in pts], marker="o", markersize=4, label=name)
        a2.plot(xs, [p[3] for p in pts], marker="o", markersize=4, label=name)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([f"{ticks[t]}\n{t:.3g}B" for t in sorted(ticks)], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("model (parameters)")
        ax.grid(color="#dddddd", linewidth=0.6)
    a1.set_yscale("log")
    a1.set_ylabel("step time, mean ms (log)")
    a2.set_ylabel("MFU, % of the stated peak" if args.mfu else "model TFLOP/s per GPU")
    a2.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    if notes:
        fig.text(0.01, 0.01, "not drawn: " + "; ".join(notes), fontsize=7, color="#aa0000", va="bottom")
    fig.suptitle(args.title or "step time and throughput by model size")
    return fig, notes


def draw_comm(recs, args):
    notes = []
    recs = ok_records(recs, notes, "timings")
    compute, overlapped, exposed = [], [], []
    for label, path, r in recs:
        step = float(field(r, "timing.step.mean_ms", path))
        comm = mean_ms(r, "comm", path) if "comm" in r["timing"] else 0.0
        exp = mean_ms(r, "comm_exposed", path) if "comm_exposed" in r["timing"] else 0.0
        if (r.get("world_size") or 1) > 1 and "comm" not in r["timing"]:
            raise BadInput(f"'{path}' ran on {r.get('world_size')} ranks but has no timing.comm (a record of an "
                           f"older trainer?); the comm kind needs timing.comm and timing.comm_exposed")
        e = min(exp, step)                          # the MPI host wait may exceed the busy time: clip to the step
        o = min(max(comm - exp, 0.0), step - e)
        exposed.append(e)
        overlapped.append(o)
        compute.append(step - e - o)
    fig, (ax,) = barh_figure(len(recs))
    stacked_barh(ax, [lab for lab, _, _ in recs],
                 [("compute", compute), ("overlapped", overlapped), ("exposed", exposed)], COMM_COLORS,
                 "step time, mean ms (rank-max per step)")
    handles, labels = ax.get_legend_handles_labels()
    names = {"compute": "compute, no collective in flight", "overlapped": "compute overlapped with communication",
             "exposed": "exposed communication (compute stalled)"}
    legend_right(ax, handles, [names[n] for n in labels])
    ax.set_title(args.title or "communication vs compute per step")
    return fig, notes


def draw_phases(recs, args):
    notes = []
    recs = ok_records(recs, notes, "timings")
    segs = {k: [] for k in ("forward", "backward", "optimizer", "other")}
    for label, path, r in recs:
        step = float(field(r, "timing.step.mean_ms", path))
        f, b, o = (mean_ms(r, k, path) for k in ("forward", "backward", "optimizer"))
        if (r.get("cuda_graph") or {}).get("used"):
            notes.append(f"{label}: its steps replayed a CUDA graph, which is timed whole: the bar is all 'other'")
        for k, v in zip(segs, (f, b, o, max(step - f - b - o, 0.0))):
            segs[k].append(v)
    fig, (ax,) = barh_figure(len(recs))
    stacked_barh(ax, [lab for lab, _, _ in recs], list(segs.items()), PHASE_COLORS, "mean ms per step")
    legend_right(ax)
    ax.set_title(args.title or "step time by phase")
    return fig, notes


def draw_memory(recs, args):
    notes = []
    recs = ok_records(recs, notes, "memory")
    cats = list(COLORS)   # the fixed order (parameters first), then any category this script does not know
    for label, path, r in recs:
        for c in field(r, "memory.by_category", path):
            if c not in cats:
                cats.append(c)
    segs = [(c, [float((r["memory"]["by_category"] or {}).get(c, 0)) / GIB for _, _, r in recs]) for c in cats]
    fig, (ax,) = barh_figure(len(recs))
    stacked_barh(ax, [lab for lab, _, _ in recs], segs, COLORS, "GiB at the peak (the trainer's pool)")
    ys = list(range(len(recs)))[::-1]
    planned = [(y, field(r, "memory.predicted.peak_bytes", p, allow_null=True)) for y, (_, p, r) in zip(ys, recs)]
    planned = [(y, b / GIB) for y, b in planned if b is not None]
    if planned:
        ax.plot([b for _, b in planned], [y for y, _ in planned], linestyle="none", marker="|", markersize=14,
                markeredgewidth=2, color="black", label="planned peak (trainer --plan)")
    legend_right(ax)
    ax.set_title(args.title or "peak memory by category")
    return fig, notes


DRAW = {"loss": draw_loss, "sweep": draw_sweep, "comm": draw_comm, "phases": draw_phases, "memory": draw_memory}


# ---- what was drawn, read back from the figure ---------------------------------------------------------------------

def dump(fig, kind, notes) -> dict:
    axes = []
    for ax in fig.axes:
        lines = [{"label": ln.get_label(), "x": [float(x) for x in ln.get_xdata()],
                  "y": [float(y) for y in ln.get_ydata()]}
                 for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        bars = []
        for c in ax.containers:   # BarContainer: one per segment, one patch per record (top to bottom reversed)
            ys = [p.get_y() + p.get_height() / 2 for p in c.patches]
            bars.append({"segment": c.get_label(), "y": ys, "values": [float(p.get_width()) for p in c.patches]})
        ticks = [t.get_text() for t in ax.get_yticklabels()] if bars else []
        axes.append({"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "lines": lines, "bars": bars, "yticks": [float(y) for y in ax.get_yticks()] if bars else [],
                     "yticklabels": ticks})
    return {"kind": kind, "axes": axes, "notes": notes}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*", metavar="[KIND] RECORD", help=f"the kind ({', '.join(KINDS)}) unless --kind "
                    "gives it, then result records (files or quoted globs)")
    ap.add_argument("--kind", choices=KINDS, help="what to draw (instead of the first argument)")
    ap.add_argument("-o", "--output", help="PNG to write (required)")
    ap.add_argument("--labels", help="comma-separated labels, one per record in input order")
    ap.add_argument("--title", help="plot title (default: what the kind shows)")
    ap.add_argument("--mfu", action="store_true", help="sweep: MFU instead of model TFLOP/s")
    ap.add_argument("--logy", action="store_true", help="loss: log-scale loss axis")
    ap.add_argument("--dump-json", metavar="PATH", help="write the drawn series as JSON ('-': stdout)")
    args = ap.parse_args(argv)
    try:
        rest = list(args.args)
        kind = args.kind
        if kind is None:
            if not rest or rest[0] not in KINDS:
                raise BadInput(f"say what to draw: the first argument or --kind must be one of {', '.join(KINDS)}"
                               + (f" (got {rest[0]!r})" if rest else ""))
            kind = rest.pop(0)
        if not rest:
            raise BadInput("no result records given")
        if not args.output:
            raise BadInput("no output: give -o OUT.png")
        out_dir = Path(args.output).resolve().parent
        if not out_dir.is_dir():
            raise BadInput(f"the output directory '{out_dir}' does not exist")
        paths = expand(rest)
        check_output(args.output, paths, "-o")
        if args.dump_json and args.dump_json != "-":
            check_output(args.dump_json, paths + [args.output], "--dump-json")
        if args.labels is not None:
            labels = [s.strip() for s in args.labels.split(",")]
            if len(labels) != len(paths):
                raise BadInput(f"--labels gives {len(labels)} labels for {len(paths)} records")
        else:
            labels = default_labels(paths)
        recs = [(lab, p, load(p)) for lab, p in zip(labels, paths)]
        fig, notes = DRAW[kind](recs, args)
        fig.tight_layout()
        if args.dump_json:
            text = json.dumps(dump(fig, kind, notes), indent=1)
            if args.dump_json == "-":
                print(text)
            else:
                try:
                    Path(args.dump_json).write_text(text + "\n")
                except OSError as e:
                    raise BadInput(f"cannot write '{args.dump_json}': {e.strerror or e}") from None
        save_figure(fig, args.output)
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for n in notes:
        print(f"# not drawn: {n}", file=sys.stderr)
    print(f"# wrote {args.output} ({kind}, {len(recs)} records)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `plot.py ... --dump-json - | head`: stop quietly
    sys.exit(main())
