#!/usr/bin/env python3
"""Draws trainer result records (the JSON of output.results, job train; collective: job collective_bench) as figures.

    launch/plot.py loss    'results/h200x2/2026-11-30/v3/small20/*.json' -o loss.png
    launch/plot.py sweep   'results/h200/2026-11-30/sweep/*_w5.json' -o sweep.png [--mfu]
    launch/plot.py comm    results/h200x2/2026-11-30/v1/xl_*.json -o comm.png
    launch/plot.py phases  results/h200/2026-12-02/v8_memory/xl_c2048_*.json -o phases.png
    launch/plot.py memory  results/h200/2026-12-02/v8_memory/*.json -o memory.png
    launch/plot.py ratio   results/plots/peer_ratio.json -o results/plots/peer_ratio_h200.png
    launch/plot.py collective results/h200x2/2026-11-30/cb_nccl_2.json -o busbw.pdf

Kinds (the first argument; `--kind KIND` also works):
  loss    the loss of every step (loss.per_step, warm-up steps included) of several runs on one axes; a resumed
          run's steps at their numbers (from steps.first + 1)
  sweep   step time (log scale) and model TFLOP/s per GPU (--mfu: MFU) against the parameter count (log scale),
          one line per precision and setting: bench.phase, the ranks and strategy, model.context_length,
          data.batch_size, checkpointing.policy, attention and the GPU (backend) split the lines where the records
          differ in them (a note names a size where one line still has several records); out-of-memory runs are
          listed; its notes name the record (its label), then its size and line: "run (xl bf16): oom"
  comm    one horizontal bar per record, the step split into compute with no collective in flight, compute
          overlapped with communication (timing.comm - comm_exposed) and exposed communication (the compute stream
          stalled, timing.comm_exposed); a 1-rank record is all compute
  phases  one horizontal bar per record: forward, backward (incl. the gradient communication of finish_backward),
          optimizer and the rest of the step (timing.step - their sum), mean ms; a note (on the figure and stderr)
          names a record whose AdamW ran inside the backward (optimizer.in_backward, the default where it can: its
          time is in the backward bar) or whose step was a CUDA graph (timed whole: all 'other')
  memory  one horizontal bar per record: the peak (memory.peak_bytes) split by category at the peak
          (memory.by_category), GiB (MiB when every peak and prediction is below 1 GiB), with the planner's
          prediction (memory.predicted.peak_bytes) as a black tick
  ratio   the trainer's step time over the PyTorch peer's (launch/torch_bench.py, torch.compile) measured in the
          same call, one line per workload against the version (x, in the manifest's order; solid between adjacent
          versions, dotted across versions without a point), each workload's bar (the ratio to reach) as a dashed
          line of its colour, 1.0 (as fast as the peer) dotted grey; a second panel (when the manifest names a
          memory_workload) draws that workload's peak memory, trainer against peer, GiB. Its one input is a manifest
          (below), not records.
  collective  records of job collective_bench: bus bandwidth (nccl-tests busbw, GB/s) against the message size
          (log-log), one line per record and collective (labelled with its ranks and communicator); a record that
          failed is listed in a note

The ratio manifest (JSON, schema "plot.peer_ratio/1"; results/plots/peer_ratio.json is the kept one):
  root              where the paths below start, relative to the manifest's folder (default: that folder)
  versions          ["v0", "v1", ...]: the x axis, in order; a version without points keeps its tick (grey)
  workloads         [{id, label, preset, precision, batch, ctx, bar}]: bar is optional (the issue's target ratio)
  memory_workload   optional: the id of the workload whose peaks the second panel draws
  points            [{version, workload, trainer: [PATH...], peer: [PATH...], note}]: one per version and workload
  skipped           optional {version: why}: documentation of the versions without points (printed as notes)
  about             optional: free text
Any other key (also in a workload or point) is an error.
A point's trainer paths are trainer result records of one call (job train, status ok, world_size 1, the workload's
model.preset, precision, data.batch_size and model.context_length, bench.phase train_step): their
timing.step.mean_ms and memory.peak_bytes are averaged. Its peer paths are torch_bench.result/1 records of the same
call, or torch_bench.sweep/1 files (the rows that match are taken): status ok, the workload's preset, batch and ctx,
phase train_step, mode compiled (precision bf16; compiled_pure for bf16_pure), one process. The fastest of them
(smallest timing.step.mean_ms) is the peer; its compile mode is compile_mode_chosen, config.compile_mode, or (a
record from before torch_bench.py had --compile-mode) torch.compile's default. ratio = trainer mean / peer. A peer
record of another status (oom, timeout) is passed over with a note; one that does not match the workload, a trainer
record that does not, or a missing file or key is an error. Every point is printed on stderr with its numbers.

Inputs are files or quoted globs (expanded here, sorted); an input that is JSON but not a record of the kind's job (a
memory timeline, a trace, a PyTorch peer record, another job's record) is passed over with a note, as memory_table.py
does. Labels are the file names without .json (with as many parent folders as make them unique; the same file twice
keeps its name) unless --labels gives them (one per record drawn or not, the files passed over not counted). A run that
failed (status oom / error) has no timings, or, where it failed after its steps, timings of a run that did not finish:
the bar kinds and sweep list it in a note (with its error, where it has one) and draw nothing of it; loss draws the
steps it has. A finished run without measured steps (bench.measure_steps 0) has no timings either: sweep, comm and
phases list it in a note. An interrupted run (status interrupted) is drawn by sweep, comm, phases and
memory from the steps it measured, with a note (loss draws its steps, labelled interrupted); one interrupted before its
first measured step is listed as a failed run, but drawn by memory, its peak being that of its warm-up steps, with the
note "from its warm-up steps". On stderr `# not drawn: ...` names what was left out, `# note: ...` something drawn that
needs a word, and the last line how many records were drawn; the notes are at the foot of the figure too (sweep and
collective: what was left out as well). -o's suffix gives the format: .png, .pdf or .svg.
--dump-json PATH writes what was drawn, read back from the figure's artists (lines: x, y; bars: one value per record
and segment), and the notes (notes: not drawn, info: notes, foot: the figure's foot), for tests and scripts.

Figures are 1100 px wide (10 in at 110 dpi; a PNG's pixels): loss 605 px high, sweep 550, the bar kinds
110 x max(3, 1.6 + 0.34 x records) px, ratio 880 (with its memory panel) or 550.

Exit codes: 0 ok, 2 bad input (a missing or unreadable file, a file that is not JSON, no trainer result record of
the kind's job among the inputs, a record without the fields the kind needs, a ratio manifest or peer record that does
not fit, nothing left to draw, an -o suffix other than .png, .pdf or .svg), with one line `plot.py: error: ...` on
stderr.
Needs matplotlib (Debian's python3-matplotlib; Agg: no display).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_common import COLORS, DPI, BadInput, check_output, pyplot, same_file, save_figure  # noqa: E402
from records import FIELD_ERRORS, clip, file_labels, size_unit  # noqa: E402

PROG = "plot.py"
FORMATS = ("png", "pdf", "svg")   # -o's suffix: the format matplotlib writes
KINDS = ("loss", "sweep", "comm", "phases", "memory", "ratio", "collective")
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


def other_kind(path: str, job: str) -> str | None:
    """Why a JSON file is not a record of `job` (a memory timeline, a trace, a PyTorch peer record, another job's
    record, another JSON document), or None when it is one (or is not JSON at all: load() says so)."""
    try:
        r = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    schema = str(r.get("schema") or "") if isinstance(r, dict) else ""
    if schema.startswith("trainer.result/"):
        return None if r.get("job") == job else f"a record of job {r.get('job')!r}"
    if schema.startswith("trainer.memory_timeline"):
        return "a memory timeline"
    if schema.startswith("torch_bench."):
        return f"a PyTorch peer record ({schema}, launch/torch_bench.py)"
    if isinstance(r, dict) and "traceEvents" in r:
        return "a trace"
    what = (f"schema {schema!r}" if schema else "no schema") if isinstance(r, dict) else f"a JSON {type(r).__name__}"
    return f"not a trainer result record ({what})"


def read_json(path: str):
    """The JSON document at `path`; BadInput (one line) when it is missing, a directory, unreadable or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"'{path}' does not exist") from None
    except IsADirectoryError:
        raise BadInput(f"'{path}' is a directory; give record files (or a quoted glob such as '{path}/*.json')") \
            from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read '{path}': {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"'{path}' is not JSON ({e})") from None


def load(path: str, job: str = "train") -> dict:
    """The record at `path`, checked to be a trainer result record of `job`."""
    r = read_json(path)
    schema = r.get("schema") if isinstance(r, dict) else None
    if not str(schema).startswith("trainer.result/"):
        got = repr(schema) if isinstance(r, dict) else f"a JSON {type(r).__name__}"
        raise BadInput(f"'{path}' is not a trainer result record (schema {got}, expected 'trainer.result/1'; "
                       f"written by trainer's output.results)")
    if r.get("job") != job:
        raise BadInput(f"'{path}' is a record of job {r.get('job')!r}; plot.py draws records of job train (kind "
                       f"collective: job collective_bench)" if job == "train" else
                       f"'{path}' is a record of job {r.get('job')!r}; the collective kind draws job collective_bench")
    return r


def field(r: dict, dotted: str, path: str, allow_null=False):
    """r's value at a dotted key; BadInput naming the file and the key when it is missing (or null). Only a key that
    is absent suggests a record of an older trainer; a null one is said to be null."""
    v, absent = r, False
    for k in dotted.split("."):
        absent = not isinstance(v, dict) or k not in v
        v = v.get(k) if isinstance(v, dict) else None
        if v is None:
            break
    if v is None and not allow_null:
        why = "a record of an older trainer?" if absent else f"{k} is null"
        raise BadInput(f"'{path}' has no {dotted} (status {r.get('status')!r}; {why}); the kind drawn needs it")
    return v


def step_stats(r) -> dict | None:
    """r's timing.step (mean_ms, std_ms, samples), None when it has none."""
    step = r.get("timing").get("step") if isinstance(r.get("timing"), dict) else None
    return step if isinstance(step, dict) else None


def unmeasured(r) -> str | None:
    """'no measured steps (bench.measure_steps 0)' for a record whose timing.step is there with a null mean (a
    finished run of bench.measure_steps 0), else None."""
    step = step_stats(r)
    if step is None or step.get("mean_ms") is not None:
        return None
    n = ((r.get("config") or {}).get("bench") or {}).get("measure_steps")
    return "no measured steps" + (f" (bench.measure_steps {n})" if n is not None else "")


def status_note(r) -> str:
    """'status oom (out of memory ...)': the status and, when the record has one, its error (cut at a word by 80)."""
    return f"status {r.get('status')}" + (f" ({clip(r['error'], 80)})" if r.get("error") else "")


def nothing_to_draw(recs, notes) -> BadInput:
    """The error for inputs of which none can be drawn: none has status ok, or none of those measured steps."""
    which = "measured steps" if any(r.get("status") == "ok" for _, _, r in recs) else "status ok"
    return BadInput(f"no record with {which} among the inputs: nothing to draw ({'; '.join(notes)})")


def mean_ms(r, phase, path):
    """timing.<phase>.mean_ms, 0 for a phase the run did not have (null: e.g. no backward in a forward bench)."""
    t = field(r, f"timing.{phase}", path)
    return float(t["mean_ms"]) if isinstance(t, dict) and t.get("mean_ms") is not None else 0.0


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


FOOT_CHARS = 170   # a line of 7 pt text across the 10 in figure
NOTE_COLOR, NOT_DRAWN_COLOR = "#555555", "#aa0000"


def info_lines(info) -> list:
    """The info notes [(label, note, detail)] for the figure's foot: one line per note, naming its records."""
    by_note = {}
    for label, note, _ in info:
        by_note.setdefault(note, []).append(label)
    return [(f"note: {', '.join(labels)}: {note}", NOTE_COLOR) for note, labels in by_note.items()]


def foot_notes(fig, lines) -> None:
    """Lines of small text [(text, colour)] at the foot of the figure, wrapped to its width, the first on top;
    main() lays the axes out above them (foot_top)."""
    renderer = fig.canvas.get_renderer()
    height_px = fig.get_figheight() * fig.dpi
    y = 3 / height_px
    for text, color in reversed(lines):
        t = fig.text(0.01, y, textwrap.fill(text, FOOT_CHARS, subsequent_indent="    "), fontsize=7, color=color,
                     va="bottom", gid="foot")
        y += t.get_window_extent(renderer).height / height_px


def foot_top(fig) -> float:
    """The top of the foot notes, as a fraction of the figure's height (0 without them)."""
    renderer = fig.canvas.get_renderer()
    tops = [t.get_window_extent(renderer).y1 for t in fig.texts if t.get_gid() == "foot"]
    return max(tops) / (fig.get_figheight() * fig.dpi) if tops else 0.0


def legend_right(ax, *handles_labels):
    """The legend outside the axes, on the right (as plot_memory.py's), so that it never hides a bar."""
    ax.legend(*handles_labels, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)


def measured(r) -> bool:
    """Whether r measured steps (a timing.step.mean_ms); not a run interrupted in its warm-up, nor one of
    bench.measure_steps 0."""
    step = step_stats(r)
    return step is not None and step.get("mean_ms") is not None


def interrupted_with_numbers(r, timed) -> bool:
    """Whether r is an interrupted run's record with the numbers a kind draws (timed: a step mean; else memory by
    category): drawn, with a note, as ddp_table.py and loss_match.py use them."""
    if r.get("status") != "interrupted":
        return False
    if timed:
        return measured(r)
    return isinstance((r.get("memory") or {}).get("by_category"), dict)


def interrupted_note(label, r) -> tuple:
    """The info note (label, note, detail) of an interrupted record that is drawn: from the steps it measured, or
    (memory) from its warm-up steps where it was interrupted before its first measured step."""
    return (label, "status interrupted: drawn from " + ("the steps it measured" if measured(r) else
                                                        "its warm-up steps"),
            f" ({r['error']})" if r.get("error") else "")


def ok_records(recs, notes, what, timed=False, info=None):
    """The records with status ok (timed: that measured steps), and, when `info` is given, the interrupted ones with
    the kind's numbers (a note in `info`); the others go to the notes."""
    keep = []
    for label, path, r in recs:
        if info is not None and interrupted_with_numbers(r, timed):
            info.append(interrupted_note(label, r))
            keep.append((label, path, r))
        elif r.get("status") != "ok":
            # a run that failed after it measured (its record or timeline not written, say) has them: not drawn
            has = measured(r) if timed else isinstance((r.get("memory") or {}).get("by_category"), dict)
            failed = r.get("status") in ("error", "oom")
            notes.append(f"{label}: {status_note(r)}: " + (f"a failed run's {what}, not drawn" if failed and has
                                                           else f"no {what}"))
        elif timed and unmeasured(r):
            notes.append(f"{label}: {unmeasured(r)}: no {what}")
        else:
            keep.append((label, path, r))
    if not keep:
        raise nothing_to_draw(recs, notes)
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
    return fig, notes, []


def fmt_params(n: float) -> str:
    """A parameter count as 1.56B, 124M or 57.8k."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


def size_name(r):
    return (r.get("model") or {}).get("preset") or r["config"]["model"].get("preset") or r.get("name") or "?"


def machine_name(r) -> str | None:
    """The GPU (or CPU) a record ran on, from its backend: 'NVIDIA H200', 'CPU'; None when the record has none (a
    run that failed before it opened the device)."""
    b = r.get("backend") or (r.get("machine") or {}).get("backend")
    return str(b).split(",")[0].split(" (")[0] if b else None


def config_part(dotted: str, fmt: str):
    """A SWEEP_SPLITS entry: r's config value at `dotted` in `fmt`, None when r has no such key."""
    def part(r):
        v = r.get("config")
        for k in dotted.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        return None if v is None else fmt.format(v)
    return part


# What splits the sweep's lines besides the precision and the phase, where the records differ in it (a line joins
# records of one setting that differ in the model size only): the part of the line's name it gives (None: unknown).
SWEEP_SPLITS = (
    lambda r: f"{r.get('world_size') or 1} rank{'s' if (r.get('world_size') or 1) != 1 else ''} "
              f"{(r['config'].get('parallel') or {}).get('strategy')}",
    config_part("model.context_length", "ctx {}"),
    config_part("data.batch_size", "batch {}"),
    config_part("checkpointing.policy", "checkpointing {}"),
    config_part("attention", "{} attention"),
    machine_name,
)


def draw_sweep(recs, args):
    notes, info = [], []
    phases = {field(r, "config.bench.phase", p) for _, p, r in recs}
    splits = [f for f in SWEEP_SPLITS if len({f(r) for _, _, r in recs} - {None}) > 1]
    series = {}   # name -> [(params, size name, step ms, rate, label)]
    for label, path, r in recs:
        key = (field(r, "config.precision", path), field(r, "config.bench.phase", path))
        name = ", ".join([" ".join(key) if len(phases) > 1 else key[0]] + [v for f in splits for v in [f(r)] if v])
        where = f"{label} ({size_name(r)} {name})"   # the record, and its size and line
        if interrupted_with_numbers(r, timed=True):
            info.append(interrupted_note(where, r))
        elif r.get("status") != "ok" or unmeasured(r):
            notes.append(f"{where}: {r.get('status') if r.get('status') != 'ok' else unmeasured(r)}")
            continue
        params = float(field(r, "model.parameters", path))
        step = float(field(r, "timing.step.mean_ms", path))
        rate = float(field(r, "throughput.mfu" if args.mfu else "throughput.model_tflops_per_gpu", path))
        series.setdefault(name, []).append((params, size_name(r), step, rate * (100 if args.mfu else 1), label))
    if not series:
        raise nothing_to_draw(recs, notes)
    for name, pts in series.items():   # records of one line at one size differ in something not split on (or repeat)
        joined = [p for p in pts if sum(q[0] == p[0] for q in pts) > 1]
        for size in sorted({p[1] for p in joined}):
            info.append((f"{', '.join(p[4] for p in joined if p[1] == size)} ({size} {name})",
                         "several records of one line at one size: joined by a vertical segment", ""))
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(WIDTH_IN, 5.0), dpi=DPI)
    ticks = {}
    # by name, its numbers by value (ctx 512 before ctx 2048): re.split puts them at the odd places
    for name, pts in sorted(series.items(), key=lambda kv: [int(t) if i % 2 else t
                                                            for i, t in enumerate(re.split(r"(\d+)", kv[0]))]):
        pts.sort()
        xs = [p[0] / 1e9 for p in pts]
        for p in pts:
            ticks[p[0] / 1e9] = p[1]
        a1.plot(xs, [p[2] for p in pts], marker="o", markersize=4, label=name)
        a2.plot(xs, [p[3] for p in pts], marker="o", markersize=4, label=name)
    for ax in (a1, a2):
        ax.set_xscale("log")
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([f"{ticks[t]}\n{fmt_params(t * 1e9)}" for t in sorted(ticks)], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("model (parameters)")
        ax.grid(color="#dddddd", linewidth=0.6)
    a1.set_yscale("log")
    a1.set_ylabel("step time, mean ms (log)")
    a2.set_ylabel("MFU, % of the stated peak" if args.mfu else "model TFLOP/s per GPU")
    a2.set_ylim(bottom=0)
    a1.legend(fontsize=8)
    foot_notes(fig, info_lines(info) + ([("not drawn: " + "; ".join(notes), NOT_DRAWN_COLOR)] if notes else []))
    fig.suptitle(args.title or "step time and throughput by model size")
    return fig, notes, info


def draw_comm(recs, args):
    notes, info = [], []
    recs = ok_records(recs, notes, "timings", timed=True, info=info)
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
    foot_notes(fig, info_lines(info))
    return fig, notes, info


def draw_phases(recs, args):
    notes, info = [], []
    recs = ok_records(recs, notes, "timings", timed=True, info=info)
    segs = {k: [] for k in ("forward", "backward", "optimizer", "other")}
    for label, path, r in recs:
        step = float(field(r, "timing.step.mean_ms", path))
        f, b, o = (mean_ms(r, k, path) for k in ("forward", "backward", "optimizer"))
        if (r.get("cuda_graph") or {}).get("used"):
            info.append((label, "its steps replayed a CUDA graph, which is timed whole: the bar is all 'other'", ""))
        elif ((r.get("config") or {}).get("optimizer") or {}).get("in_backward"):
            info.append((label, "AdamW ran inside the backward (optimizer.in_backward): its time is in the backward "
                                "bar", " (bench_sweep.py --handout, or --set optimizer.in_backward=false, times it "
                                       "apart)"))
        for k, v in zip(segs, (f, b, o, max(step - f - b - o, 0.0))):
            segs[k].append(v)
    fig, (ax,) = barh_figure(len(recs))
    stacked_barh(ax, [lab for lab, _, _ in recs], list(segs.items()), PHASE_COLORS, "mean ms per step")
    legend_right(ax)
    ax.set_title(args.title or "step time by phase")
    foot_notes(fig, info_lines(info))
    return fig, notes, info


def draw_memory(recs, args):
    notes, info = [], []
    recs = ok_records(recs, notes, "memory", info=info)
    cats = list(COLORS)   # the fixed order (parameters first), then any category this script does not know
    for label, path, r in recs:
        for c in field(r, "memory.by_category", path):
            if c not in cats:
                cats.append(c)
    ys = list(range(len(recs)))[::-1]
    planned = [(y, field(r, "memory.predicted.peak_bytes", p, allow_null=True)) for y, (_, p, r) in zip(ys, recs)]
    # GiB, or MiB when every bar and prediction is below 1 GiB (as memory_table.py): no bar reads 0.0
    unit, scale = size_unit([sum(float(v) for v in r["memory"]["by_category"].values()) for _, _, r in recs]
                            + [b for _, b in planned])
    segs = [(c, [float((r["memory"]["by_category"] or {}).get(c, 0)) / scale for _, _, r in recs]) for c in cats]
    fig, (ax,) = barh_figure(len(recs))
    stacked_barh(ax, [lab for lab, _, _ in recs], segs, COLORS, f"{unit} at the peak (the trainer's pool)")
    planned = [(y, b / scale) for y, b in planned if b is not None]
    if planned:
        ax.plot([b for _, b in planned], [y for y, _ in planned], linestyle="none", marker="|", markersize=14,
                markeredgewidth=2, color="black", label="planned peak (trainer --plan)")
    legend_right(ax)
    ax.set_title(args.title or "peak memory by category")
    foot_notes(fig, info_lines(info))
    return fig, notes, info


# ---- ratio: the trainer against the PyTorch peer of the same call, by version --------------------------------------

MANIFEST_SCHEMA = "plot.peer_ratio/1"
PEER_MODE = {"bf16": "compiled", "bf16_pure": "compiled_pure"}   # the peer's torch.compile mode per precision
RATIO_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860"]


JSON_TYPE = {str: "a string", int: "an integer", float: "a number", list: "a list", dict: "an object"}


def manifest_key(m: dict, key: str, kind, where: str, path: str, optional=False):
    """m[key] of the type `kind`; BadInput naming the manifest, the place and the key otherwise."""
    if key not in m or m[key] is None:
        if optional:
            return None
        raise BadInput(f"'{path}': {where} has no '{key}' (see plot.py --help, the ratio manifest)")
    v = m[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(v, kinds) or isinstance(v, bool) and bool not in kinds:
        names = " or ".join(JSON_TYPE[k] for k in kinds)
        raise BadInput(f"'{path}': {where}'s '{key}' is {v!r}, not {names}")
    return v


MANIFEST_KEYS = {"manifest": ("schema", "about", "root", "versions", "workloads", "memory_workload", "points",
                              "skipped"),
                 "workload": ("id", "label", "preset", "precision", "batch", "ctx", "bar"),
                 "point": ("version", "workload", "trainer", "peer", "note")}


def known_keys(m: dict, what: str, where: str, path: str) -> None:
    """BadInput for a key the manifest format does not have (a misspelt one would otherwise be ignored)."""
    for k in m:
        if k not in MANIFEST_KEYS[what]:
            raise BadInput(f"'{path}': {where} has an unknown key '{k}' (known: {', '.join(MANIFEST_KEYS[what])})")


def load_manifest(path: str) -> dict:
    """The ratio manifest at `path`, checked: its versions, workloads and points, with every record path resolved
    (against `root`, relative to the manifest's folder). Reads no record yet."""
    m = read_json(path)
    if not isinstance(m, dict) or m.get("schema") != MANIFEST_SCHEMA:
        got = repr(m.get("schema")) if isinstance(m, dict) else f"a JSON {type(m).__name__}"
        raise BadInput(f"'{path}' is not a ratio manifest (schema {got}, expected '{MANIFEST_SCHEMA}'; see plot.py "
                       f"--help)")
    known_keys(m, "manifest", "the manifest", path)
    base = Path(path).resolve().parent
    root = base / (manifest_key(m, "root", str, "the manifest", path, optional=True) or ".")
    versions = manifest_key(m, "versions", list, "the manifest", path)
    if not versions or not all(isinstance(v, str) and v for v in versions) or len(set(versions)) != len(versions):
        raise BadInput(f"'{path}': versions must be a list of distinct names (got {versions!r})")
    workloads = {}
    for i, w in enumerate(manifest_key(m, "workloads", list, "the manifest", path)):
        where = f"workloads[{i}]"
        if not isinstance(w, dict):
            raise BadInput(f"'{path}': {where} is {w!r}, not an object")
        known_keys(w, "workload", where, path)
        wid = manifest_key(w, "id", str, where, path)
        if wid in workloads:
            raise BadInput(f"'{path}': workload '{wid}' is listed twice")
        precision = manifest_key(w, "precision", str, where, path)
        if precision not in PEER_MODE:
            raise BadInput(f"'{path}': workload '{wid}' has precision '{precision}'; the peer is compiled only for "
                           f"{', '.join(PEER_MODE)}")
        workloads[wid] = {"id": wid, "label": manifest_key(w, "label", str, where, path, optional=True) or wid,
                          "preset": manifest_key(w, "preset", str, where, path), "precision": precision,
                          "batch": manifest_key(w, "batch", int, where, path),
                          "ctx": manifest_key(w, "ctx", int, where, path),
                          "bar": manifest_key(w, "bar", (int, float), where, path, optional=True)}
    if not workloads:
        raise BadInput(f"'{path}': no workloads")
    mem = manifest_key(m, "memory_workload", str, "the manifest", path, optional=True)
    if mem is not None and mem not in workloads:
        raise BadInput(f"'{path}': memory_workload '{mem}' is not one of the workloads ({', '.join(workloads)})")
    skipped = manifest_key(m, "skipped", dict, "the manifest", path, optional=True) or {}
    for v in skipped:
        if v not in versions:
            raise BadInput(f"'{path}': skipped names '{v}', which is not one of the versions")
    points, seen = [], set()
    for i, pt in enumerate(manifest_key(m, "points", list, "the manifest", path)):
        where = f"points[{i}]"
        if not isinstance(pt, dict):
            raise BadInput(f"'{path}': {where} is {pt!r}, not an object")
        known_keys(pt, "point", where, path)
        version = manifest_key(pt, "version", str, where, path)
        wid = manifest_key(pt, "workload", str, where, path)
        where = f"point {version} {wid}"
        if version not in versions:
            raise BadInput(f"'{path}': {where}: '{version}' is not one of the versions")
        if wid not in workloads:
            raise BadInput(f"'{path}': {where}: '{wid}' is not one of the workloads ({', '.join(workloads)})")
        if version in skipped:
            raise BadInput(f"'{path}': {where}: '{version}' is also listed as skipped")
        if (version, wid) in seen:
            raise BadInput(f"'{path}': {where} is listed twice")
        seen.add((version, wid))
        files = {}
        for side in ("trainer", "peer"):
            lst = manifest_key(pt, side, list, where, path)
            if not lst or not all(isinstance(f, str) and f for f in lst):
                raise BadInput(f"'{path}': {where}'s '{side}' must be a non-empty list of paths (got {lst!r})")
            files[side] = [os.path.relpath(root / f) for f in lst]
        points.append({"version": version, "workload": wid, "trainer": files["trainer"], "peer": files["peer"],
                       "note": pt.get("note")})
    if not points:
        raise BadInput(f"'{path}': no points: nothing to draw")
    return {"versions": versions, "workloads": workloads, "memory_workload": mem, "points": points,
            "skipped": skipped}


def workload_text(w: dict) -> str:
    return f"{w['preset']} {w['precision']} batch {w['batch']} ctx {w['ctx']}"


def trainer_side(paths: list[str], w: dict, where: str) -> dict:
    """The mean step ms and mean peak bytes of the trainer records of one point, each checked to be the workload."""
    steps, peaks = [], []
    for p in paths:
        try:
            r = load(p)
        except BadInput as e:
            raise BadInput(f"{e} ({where}, trainer)") from None
        if r.get("status") != "ok":
            raise BadInput(f"'{p}' ({where}) has status {r.get('status')!r}: a point needs the trainer's ok records")
        got = {"preset": size_name(r), "precision": field(r, "config.precision", p),
               "batch": field(r, "config.data.batch_size", p), "ctx": field(r, "config.model.context_length", p)}
        phase, ranks = field(r, "config.bench.phase", p), r.get("world_size") or 1
        if any(got[k] != w[k] for k in got) or phase != "train_step" or ranks != 1:
            raise BadInput(f"'{p}' ({where}) is {workload_text(got)}, {phase}, {ranks} rank(s), not the workload "
                           f"{w['id']} ({workload_text(w)}, train_step, 1 rank)")
        steps.append(float(field(r, "timing.step.mean_ms", p)))
        peak = field(r, "memory.peak_bytes", p, allow_null=True)
        peaks.append(None if peak is None else float(peak))
    return {"ms": sum(steps) / len(steps), "each_ms": steps, "files": paths,
            "peak_bytes": None if None in peaks else sum(peaks) / len(peaks)}


def peer_side(paths: list[str], w: dict, where: str, notes: list) -> dict:
    """The fastest ok peer record among a point's files (torch_bench.result/1, or the matching rows of a
    torch_bench.sweep/1): its step ms, peak bytes, compile mode and where it came from."""
    mode = PEER_MODE[w["precision"]]
    cands = []
    for p in paths:
        try:
            d = read_json(p)
        except BadInput as e:
            raise BadInput(f"{e} ({where}, peer)") from None
        schema = d.get("schema") if isinstance(d, dict) else None
        if schema == "torch_bench.sweep/1":
            rows = d.get("rows")
            if not isinstance(rows, list):
                raise BadInput(f"'{p}' ({where}) is a torch_bench sweep without a list of rows")
            got = [(f"{p} rows[{i}]", r) for i, r in enumerate(rows) if isinstance(r, dict) and peer_fits(r, w, mode)]
            if not got:
                raise BadInput(f"'{p}' ({where}) has no row of mode {mode}, phase train_step, {w['preset']} batch "
                               f"{w['batch']} ctx {w['ctx']}")
            cands += got
        elif schema == "torch_bench.result/1":
            if not peer_fits(d, w, mode):
                c = d.get("config") or {}
                raise BadInput(f"'{p}' ({where}) is the peer's {c.get('preset')} {c.get('mode')} {c.get('phase')} "
                               f"batch {c.get('batch')} ctx {c.get('ctx')}"
                               + (f" on {c.get('world_size')} ranks" if (c.get("world_size") or 1) != 1 else "")
                               + (f", checkpoint {c.get('checkpoint')}" if c.get("checkpoint") not in (None, "none")
                                  else "")
                               + f", not the workload {w['id']} ({w['preset']} {mode} train_step batch {w['batch']} "
                                 f"ctx {w['ctx']}, one process)")
            cands.append((p, d))
        else:
            got = repr(schema) if isinstance(d, dict) else f"a JSON {type(d).__name__}"
            raise BadInput(f"'{p}' ({where}) is not a PyTorch peer record (schema {got}, expected "
                           f"'torch_bench.result/1' or 'torch_bench.sweep/1'; written by launch/torch_bench.py --json)")
    ok = []
    for src, r in cands:
        if r.get("status") != "ok":
            notes.append(f"{where}: peer {src} has status {r.get('status')} ({str(r.get('error'))[:60]}): passed over")
            continue
        ok.append((float(field(r, "timing.step.mean_ms", src)), src, r))
    if not ok:
        raise BadInput(f"{where}: no peer record with status ok among {', '.join(paths)}")
    ms, src, r = min(ok, key=lambda t: t[0])
    peak = field(r, "memory.peak_bytes", src, allow_null=True)
    return {"ms": ms, "file": src, "compile_mode": peer_compile_mode(r),
            "peak_bytes": None if peak is None else float(peak),
            "candidates": [{"file": s, "ms": t, "compile_mode": peer_compile_mode(rr)} for t, s, rr in ok]}


def peer_compile_mode(r: dict) -> str:
    """The torch.compile mode of a peer record: --compile-mode best's choice, its config's, or (a record from before
    torch_bench.py had --compile-mode, which called plain torch.compile) default."""
    return r.get("compile_mode_chosen") or (r.get("config") or {}).get("compile_mode") or "default"


def peer_fits(r: dict, w: dict, mode: str) -> bool:
    c = r.get("config")
    return isinstance(c, dict) and c.get("preset") == w["preset"] and c.get("mode") == mode \
        and c.get("phase") == "train_step" and c.get("batch") == w["batch"] and c.get("ctx") == w["ctx"] \
        and (c.get("world_size") or 1) == 1 and c.get("checkpoint") in (None, "none")


# The ratio's marker: which torch.compile mode of the peer was the fastest beside it (before v12 only default was run).
MODE_MARKERS = {"default": "o", "reduce-overhead": "s", "max-autotune-no-cudagraphs": "^", "max-autotune": "D"}

MEMORY_SERIES = (("trainer_peak_bytes", "trainer (its pool's peak)", "#4c72b0", "o"),
                 ("peer_peak_bytes", "PyTorch (max_memory_allocated), the mode of the ratio", "#c44e52", "s"))


def solid_legend(ax, series_labels, **kw):
    """The legend, with the series (drawn dotted across versions without points) shown as a solid line with its
    marker, apart from the dashed bars."""
    from matplotlib.lines import Line2D
    handles, labels = ax.get_legend_handles_labels()
    handles = [Line2D([], [], color=h.get_color(), marker=h.get_marker(), markersize=5, linewidth=1.6)
               if lab in series_labels else h for h, lab in zip(handles, labels)]
    ax.legend(handles, labels, fontsize=8, framealpha=0.9, **kw)


def series_line(ax, pts, color, marker, label):
    """One series against the version: markers joined by a thin dotted line (the labelled artist, all points), and
    solid segments only between adjacent versions, so that a line across versions without points is not read as
    measured there."""
    ax.plot([x for x, _ in pts], [y for _, y in pts], marker=marker, markersize=5, linewidth=1.0, linestyle=":",
            color=color, label=label)
    run = [pts[0]]
    for p in pts[1:] + [None]:
        if p is not None and p[0] == run[-1][0] + 1:
            run.append(p)
            continue
        if len(run) > 1:
            ax.plot([x for x, _ in run], [y for _, y in run], linewidth=1.6, color=color, label="_segment")
        run = [p]


def value_label(ax, x, y, text, color, others, near):
    """The value beside its marker: above, unless another series' value at this version lies just above it (within
    `near`), then below, so that the labels of close series do not overlap."""
    below = any(y <= o <= y + near for o in others)
    ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, -12 if below else 6), ha="center", fontsize=7,
                color=color)


def draw_ratio(man: dict, args):
    notes, rows = [], []
    for pt in man["points"]:
        w = man["workloads"][pt["workload"]]
        where = f"point {pt['version']} {pt['workload']}"
        t = trainer_side(pt["trainer"], w, where)
        peer = peer_side(pt["peer"], w, where, notes)
        rows.append({"version": pt["version"], "workload": w["id"], "trainer_ms": t["ms"],
                     "trainer_each_ms": t["each_ms"], "trainer_files": t["files"],
                     "trainer_peak_bytes": t["peak_bytes"], "peer_ms": peer["ms"], "peer_file": peer["file"],
                     "peer_compile_mode": peer["compile_mode"], "peer_peak_bytes": peer["peak_bytes"],
                     "peer_candidates": peer["candidates"], "ratio": t["ms"] / peer["ms"], "note": pt["note"]})
    for v, why in man["skipped"].items():
        notes.append(f"{v}: no point ({why})")
    versions = man["versions"]
    xpos = {v: i for i, v in enumerate(versions)}
    mem = man["memory_workload"]
    plt = pyplot()
    if mem:
        fig, (ax, mx) = plt.subplots(2, 1, figsize=(WIDTH_IN, 8.0), dpi=DPI, sharex=True,
                                     gridspec_kw={"height_ratios": [1.7, 1.0]})
    else:
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.0), dpi=DPI)
        mx = None
    ys = [r["ratio"] for r in rows] + [1.0] + [w["bar"] for w in man["workloads"].values() if w["bar"] is not None]
    span = max(ys) - min(ys)
    for k, (wid, w) in enumerate(man["workloads"].items()):
        color = RATIO_COLORS[k % len(RATIO_COLORS)]
        moded = sorted((xpos[r["version"]], r["ratio"], r["peer_compile_mode"]) for r in rows if r["workload"] == wid)
        pts = [(x, y) for x, y, _ in moded]
        if pts:
            series_line(ax, pts, color, "", w["label"])
            for x, y, m in moded:  # the marker names the peer's mode: the ratio changes meaning with it
                ax.plot([x], [y], linestyle="none", marker=MODE_MARKERS.get(m, "X"), markersize=6, color=color,
                        label="_mode")
            others = [(xpos[r["version"]], r["ratio"]) for r in rows if r["workload"] != wid]
            for x, y in pts:
                value_label(ax, x, y, f"{y:.2f}", color, [o for xo, o in others if xo == x], 0.1 * span)
        if w["bar"] is not None:
            ax.axhline(w["bar"], linestyle="--", linewidth=1.2, color=color, label=f"bar {w['label']}: {w['bar']:g}x")
            ys.append(w["bar"])
    ax.axhline(1.0, linestyle=":", linewidth=1.0, color="#777777", label="1.0 = as fast as the peer")
    for m in sorted({r["peer_compile_mode"] for r in rows}, key=lambda m: list(MODE_MARKERS).index(m)
                    if m in MODE_MARKERS else len(MODE_MARKERS)):
        ax.plot([], [], linestyle="none", marker=MODE_MARKERS.get(m, "X"), markersize=6, color="#444444",
                label=f"peer's fastest: compile {m}")
    ax.set_ylim(min(ys) - 0.08 * span - 0.02, max(ys) + 0.12 * span + 0.02)
    ax.set_ylabel("trainer step / PyTorch step\n(the peer's fastest compile mode measured beside it)")
    ax.grid(color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    solid_legend(ax, [w["label"] for w in man["workloads"].values()], loc="lower right", ncol=2)
    ax.set_title(args.title or "trainer step time over the PyTorch peer's, by version (lower is better)")
    drawn = {r["version"] for r in rows}
    axes = [ax] + ([mx] if mx is not None else [])
    if mx is not None:
        w = man["workloads"][mem]
        both = sorted((xpos[r["version"]], r) for r in rows if r["workload"] == mem)
        for r in (r for r in rows if r["workload"] == mem):
            if r["trainer_peak_bytes"] is None or r["peer_peak_bytes"] is None:
                notes.append(f"point {r['version']} {mem}: no peak memory on the "
                             f"{'trainer' if r['trainer_peak_bytes'] is None else 'peer'} side: not in the memory "
                             f"panel")
        both = [(x, r) for x, r in both if r["trainer_peak_bytes"] is not None and r["peer_peak_bytes"] is not None]
        gib = {key: [r[key] / GIB for _, r in both] for key in ("trainer_peak_bytes", "peer_peak_bytes")}
        mspan = max(max(v) - min(v) for v in gib.values()) if both else 0
        for key, label, color, marker in MEMORY_SERIES:
            other = gib["peer_peak_bytes" if key == "trainer_peak_bytes" else "trainer_peak_bytes"]
            pts = [(x, y) for (x, _), y in zip(both, gib[key])]
            if pts:
                series_line(mx, pts, color, marker, label)
                for (x, y), o in zip(pts, other):
                    value_label(mx, x, y, f"{y:.1f}", color, [o], 0.5 * mspan + 1.0)
        if not both:
            notes.append(f"memory panel: no point of {mem} has both peaks")
        mx.set_ylabel(f"peak GiB, {w['label']}")
        lo, hi = mx.get_ylim()
        mx.set_ylim(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo))
        mx.grid(color="#dddddd", linewidth=0.6)
        mx.set_axisbelow(True)
        solid_legend(mx, [lab for _, lab, _, _ in MEMORY_SERIES], loc="upper right")
        mx.set_title(f"peak memory, {w['label']}: trainer vs PyTorch (where both were recorded)", fontsize=10)
    for a in axes:
        a.set_xticks(range(len(versions)))
        a.set_xticklabels(versions, fontsize=8)
        a.tick_params(labelbottom=True)
        for lab, v in zip(a.get_xticklabels(), versions):
            if v not in drawn:
                lab.set_color("#aaaaaa")
        a.set_xlim(-0.6, len(versions) - 0.4)
    axes[-1].set_xlabel("version (grey: no call with the trainer beside the peer kept as records)")
    return fig, notes, rows


def fmt_size(b: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.4g} {unit}"
    return f"{b:.4g} B"


def draw_collective(recs, args):
    notes = []
    recs = ok_records(recs, notes, "bandwidths")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 5.5), dpi=DPI)
    sizes = set()
    n = 0
    for label, path, r in recs:
        cb = field(r, "collective_bench", path)
        rows = field(r, "collective_bench.results", path)
        if not isinstance(rows, list) or not rows:
            raise BadInput(f"'{path}': collective_bench.results holds no rows")
        by_op = {}
        for row in rows:
            try:
                by_op.setdefault(str(row["op"]), []).append((float(row["size_bytes"]), float(row["busbw_gbs"])))
            except (KeyError, TypeError, ValueError):
                raise BadInput(f"'{path}': a collective_bench row without op, size_bytes or busbw_gbs: {row}") \
                    from None
        for op, pts in sorted(by_op.items()):
            pts.sort()
            sizes.update(p[0] for p in pts)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=4,
                    color=RATIO_COLORS[n % len(RATIO_COLORS)],
                    label=f"{label}: {op} ({cb.get('nranks')} ranks, {cb.get('comm')})")
            n += 1
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = []  # one tick per size asked for (reduce_scatter / all_gather round it down to a multiple of the ranks)
    for s in sorted(sizes):
        if ticks and s <= ticks[-1] * 1.02:
            ticks[-1] = s  # the cluster's largest: the size asked for
        else:
            ticks.append(s)
    if len(ticks) <= 12:
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_size(t) for t in ticks], fontsize=8)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    if len(ticks) <= 12:
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("message size (the whole array, nccl-tests)")
    ax.set_ylabel("bus bandwidth, GB/s (log)")
    ax.grid(color="#dddddd", linewidth=0.6, which="both")
    ax.legend(fontsize=8, loc="best")
    ax.set_title(args.title or "collective bus bandwidth by message size")
    foot_notes(fig, [("not drawn: " + "; ".join(notes), NOT_DRAWN_COLOR)] if notes else [])
    return fig, notes, []


DRAW = {"loss": draw_loss, "sweep": draw_sweep, "comm": draw_comm, "phases": draw_phases, "memory": draw_memory,
        "collective": draw_collective}


# ---- what was drawn, read back from the figure ---------------------------------------------------------------------

def dump(fig, kind, notes, extra=None) -> dict:
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
    foot = [t.get_text() for t in sorted((t for t in fig.texts if t.get_gid() == "foot"),  # the figure's foot,
                                         key=lambda t: -t.get_position()[1])]             # the top line first
    return {"kind": kind, "axes": axes, "notes": notes, "foot": foot, **(extra or {})}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("args", nargs="*", metavar="[KIND] RECORD", help=f"the kind ({', '.join(KINDS)}) unless --kind "
                    "gives it, then result records (files or quoted globs); for ratio one manifest")
    ap.add_argument("--kind", choices=KINDS, help="what to draw (instead of the first argument)")
    ap.add_argument("-o", "--output", help="the figure to write, .png, .pdf or .svg by its suffix (required)")
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
            raise BadInput("no ratio manifest given (plot.py ratio MANIFEST.json -o OUT.png)" if kind == "ratio"
                           else "no result records given")
        if kind == "ratio" and len(rest) > 1:
            raise BadInput(f"ratio takes one manifest, not {len(rest)} files (the records are named in the manifest)")
        if kind == "ratio" and args.labels is not None:
            raise BadInput("--labels is for the record kinds; ratio takes its labels from the manifest's workloads")
        if not args.output:
            raise BadInput("no output: give -o OUT.png")
        out_dir = Path(args.output).resolve().parent
        if not out_dir.is_dir():
            raise BadInput(f"the output directory '{out_dir}' does not exist")
        extra, info = None, []
        if kind == "ratio":
            man = load_manifest(rest[0])
            paths = [rest[0]] + [f for pt in man["points"] for f in pt["trainer"] + pt["peer"]]
        else:
            paths = expand(rest)
            # the inputs (a shell's glob too) may hold JSON files that are not records of this kind (a memory
            # timeline or a trace beside the records, a PyTorch peer record, another job's record): passed over
            # with a note, as memory_table.py and ddp_table.py do; an error only when no record is left
            job = "collective_bench" if kind == "collective" else "train"
            skipped = [(p, why) for p in paths for why in [other_kind(p, job)] if why]
            paths = [p for p in paths if p not in {s for s, _ in skipped}]
            if not paths:
                raise BadInput(f"no trainer result record of job {job} among the inputs ("
                               + "; ".join(f"{p}: {why}" for p, why in skipped) + ")")
        check_output(args.output, paths, "-o")
        fmt = Path(args.output).suffix.lower().lstrip(".")
        if fmt not in FORMATS:
            raise BadInput(f"-o '{args.output}': plot.py writes .png, .pdf or .svg (the suffix gives the format)")
        if args.dump_json and args.dump_json != "-":
            if same_file(args.dump_json, args.output):
                raise BadInput(f"--dump-json '{args.dump_json}' is also the -o output: give another name")
            check_output(args.dump_json, paths, "--dump-json")
        if kind == "ratio":
            fig, notes, rows = draw_ratio(man, args)
            recs = rows
            extra = {"versions": man["versions"], "points": rows}
        else:
            if args.labels is not None:
                labels = [s.strip() for s in args.labels.split(",")]
                if len(labels) != len(paths):
                    raise BadInput(f"--labels gives {len(labels)} labels for {len(paths)} records")
            else:
                labels = file_labels(paths)
            recs = [(lab, p, load(p, "collective_bench" if kind == "collective" else "train"))
                    for lab, p in zip(labels, paths)]
            fig, notes, info = DRAW[kind](recs, args)
            drawn = len(recs) - len(notes)   # a note each for the records not drawn (info: drawn, with a note)
            notes = [f"{p}: {why}, skipped" for p, why in skipped] + notes
        fig.tight_layout(rect=(0, foot_top(fig), 1, 1))
        if args.dump_json:
            extra = {**(extra or {}), "info": [f"{label}: {note}{detail}" for label, note, detail in info]}
            text = json.dumps(dump(fig, kind, notes, extra), indent=1)
            if args.dump_json == "-":
                print(text)
            else:  # whole, then renamed (as the PNG)
                tmp = f"{args.dump_json}.tmp.{os.getpid()}"
                try:
                    Path(tmp).write_text(text + "\n")
                    os.replace(tmp, args.dump_json)
                except OSError as e:
                    raise BadInput(f"cannot write '{args.dump_json}': {e.strerror or e}") from None
                finally:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
        save_figure(fig, args.output, fmt)
    except BadInput as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except FIELD_ERRORS as e:  # a field of another type or shape
        print(f"{PROG}: error: a record holds a field the kind cannot read ({type(e).__name__}: {e}): is it a "
              "trainer result record, unedited?", file=sys.stderr)
        return 2
    if kind == "ratio":
        for r in recs:
            print(f"# {r['version']} {r['workload']}: trainer {r['trainer_ms']:.3f} ms (mean of "
                  f"{len(r['trainer_files'])}: {', '.join(r['trainer_files'])}) / peer {r['peer_ms']:.3f} ms "
                  f"(compile {r['peer_compile_mode']}: {r['peer_file']}) = {r['ratio']:.3f}", file=sys.stderr)
    for label, note, detail in info:
        print(f"# note: {label}: {note}{detail}", file=sys.stderr)
    for n in notes:
        print(f"# not drawn: {n}", file=sys.stderr)
    if kind == "ratio":
        print(f"# wrote {args.output} (ratio, {len(recs)} points)", file=sys.stderr)
    else:
        print(f"# wrote {args.output} ({kind}, {drawn} of {len(recs)} records drawn)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `plot.py ... --dump-json - | head`: stop quietly
    sys.exit(main())
