#!/usr/bin/env python3
"""Draws a trainer memory timeline (profile.memory_timeline) and lists what was alive at its peak.

    build/trainer configs/xl.json --set profile.memory_timeline=results/xl_mem.json
    launch/plot_memory.py results/xl_mem.json [-o results/xl_mem.png] [--title "xl bf16, ctx 2048"] [--x time]

The PNG shows the bytes in use (allocated through the trainer's Buffers, as requested, not rounded) stacked by
category (parameters, gradients, optimizer, activations, head, workspace, communication) against the event index
(default: every allocation and free is one step of the axis, so short phases stay visible) or the host time in ms
(--x time); phases (setup, forward, backward, finish_backward, optimizer) are shaded and named along the x axis, a
dashed line marks the peak, and an allocation that failed (the run ran out of memory) is marked in red with the total it
asked for. Stdout gets the peak (where and when) and a table of the --top largest allocations alive at the peak: size,
category, the phase and block that allocated it, its id and its event index. The timeline is replayed here from the
events alone (the document's "peak" is only cross-checked), the way PyTorch's memory_viz reads a snapshot.

Exit codes: 0 ok, 2 bad input (a missing or unreadable file, not a trainer.memory_timeline/1 document), with one line
`plot_memory.py: error: ...` on stderr. Needs numpy and matplotlib (Agg: no display).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_common import COLORS, DPI, BadInput, check_output, fmt_bytes, pyplot, save_figure  # noqa: E402

SCHEMA = "trainer.memory_timeline/1"
PHASE_SHADES = ("#f2f2f2", "#e0e0e0")


def place(e: dict) -> str:
    """'block 3', 'lm_head' or '-' for an event's block."""
    name = e.get("block_name")
    if not name:
        return "-"
    return f"{name} {e['block']}" if e.get("block", -1) >= 0 else str(name)


def load(path: str) -> dict:
    """The document at `path`, checked: schema, categories, and every event's fields and types."""
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInput(f"'{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read '{path}': {e}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"'{path}' is not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise BadInput(f"'{path}' is not a memory timeline (schema {got!r}, expected {SCHEMA!r}; "
                       f"made by trainer --set profile.memory_timeline=PATH)")
    cats, events = doc.get("categories"), doc.get("events")
    if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats) or not isinstance(events, list):
        raise BadInput(f"'{path}': 'categories' must be a list of names and 'events' a list")
    for k, e in enumerate(events):
        ok = (isinstance(e, dict) and isinstance(e.get("bytes"), int) and isinstance(e.get("id"), int)
              and isinstance(e.get("t_ms"), (int, float)) and e.get("category") in cats)
        if not ok:
            raise BadInput(f"'{path}': event {k} is malformed: {json.dumps(e)[:200]}")
    return doc


def replay(doc: dict):
    """Running bytes per category after each event (failed allocations count nothing), the peak and the
    allocations alive at the peak. Returns (totals [n_events][n_cats], peak_bytes, peak_index, alive list)."""
    cats = doc["categories"]
    ci = {c: i for i, c in enumerate(cats)}
    cur = [0] * len(cats)
    rows = []
    total = peak = 0
    peak_at = None
    for k, e in enumerate(doc["events"]):
        if not e.get("failed"):
            cur[ci[e["category"]]] += e["bytes"]
            total += e["bytes"]
            if total > peak:
                peak, peak_at = total, k
        rows.append(list(cur))
    alive = {}
    if peak_at is not None:
        for k, e in enumerate(doc["events"][:peak_at + 1]):
            if e.get("failed"):
                continue
            if e["bytes"] > 0:
                alive[e["id"]] = dict(e, index=k)
            else:
                alive.pop(e["id"], None)
    return rows, peak, peak_at, sorted(alive.values(), key=lambda a: (-a["bytes"], a["index"]))


def phase_runs(events, xs, x_end):
    """[(phase, x_start, x_end)] for each run of consecutive events in the same phase; the last ends at x_end."""
    runs = []
    for k, e in enumerate(events):
        ph = e.get("phase") or "?"
        if runs and runs[-1][0] == ph:
            runs[-1][2] = xs[k]
        else:
            runs.append([ph, xs[k], xs[k]])
    # Each run reaches to where the next one starts, so the shading has no gaps.
    for a, b in zip(runs, runs[1:]):
        a[2] = b[1]
    if runs:
        runs[-1][2] = x_end
    return [tuple(r) for r in runs]


def plot(doc, rows, peak, peak_at, out: str, title: str, x_mode: str) -> None:
    plt = pyplot()
    import numpy as np

    events, cats = doc["events"], doc["categories"]
    xs = np.arange(len(events), dtype=float) if x_mode == "index" else np.array([e["t_ms"] for e in events], float)
    unit, scale = next((u, s) for u, s in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 1024), ("B", 1))
                       if peak >= s or s == 1)
    data = np.array(rows, dtype=float).reshape(len(events), len(cats)) / scale
    used = [i for i in range(len(cats)) if len(events) and data[:, i].max() > 0]
    fig, ax = plt.subplots(figsize=(13, 6), dpi=DPI)
    if len(events):
        # Each event's state holds until the next event; in index mode the last one gets its unit of width too.
        x_end = xs[-1] + 1 if x_mode == "index" else (xs[-1] if xs[-1] > xs[0] else xs[0] + 1)
        xp, dp = np.append(xs, x_end), np.vstack([data, data[-1:]])
        if used:   # nothing is used when the first allocation already failed
            ax.stackplot(xp, *[dp[:, i] for i in used], labels=[cats[i] for i in used],
                         colors=[COLORS.get(cats[i], None) for i in used], step="post", linewidth=0)
        top = max(peak / scale, 1e-9)
        span = x_end - xs[0]
        for n, (ph, x0, x1) in enumerate(phase_runs(events, xs, x_end)):
            ax.axvspan(x0, x1, color=PHASE_SHADES[n % 2], zorder=-2, linewidth=0)
            # name the runs wide enough to carry their label (8 pt: ~0.065 in a character on the ~11 in wide
            # axes), alternate runs a line lower, so that neighbours' names do not run together
            if (x1 - x0) / span * 11.0 > 0.065 * len(ph) + 0.1:
                ax.text((x0 + x1) / 2, 0.99 - 0.04 * (n % 2), ph, transform=ax.get_xaxis_transform(), ha="center",
                        va="top", fontsize=8, color="#444444")
        if peak_at is not None:
            e = events[peak_at]
            ax.axhline(top, color="black", linestyle="--", linewidth=1)
            ax.text(xs[0], top, f" peak {fmt_bytes(peak)} ({e.get('phase')}, {place(e)})", va="bottom", fontsize=9)
        for k, e in enumerate(events):
            if e.get("failed"):   # a red line where the run ran out of memory, with what it asked for
                ax.axvline(xs[k], color="red", linewidth=1.5)
                ax.text(xs[k], 0.5, f"out of memory: {fmt_bytes(e['bytes'])} {e['category']} asked with "
                        f"{fmt_bytes(sum(rows[k]))} in use ", transform=ax.get_xaxis_transform(), rotation=90,
                        ha="right", va="center", color="red", fontsize=9)
        ax.set_ylim(0, top * 1.15)
        ax.set_xlim(xs[0], x_end)
    ax.set_xlabel("event (allocation or free)" if x_mode == "index" else "host time (ms since the log started)")
    ax.set_ylabel(f"bytes in use ({unit})")
    ax.set_title(title)
    if used:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=9)
    fig.tight_layout()
    save_figure(fig, out)


def report(path, doc, peak, peak_at, alive, top: int) -> str:
    events = doc["events"]
    lines = [f"# memory timeline {path}: {len(events)} events, rank {doc.get('rank', 0)} of "
             f"{doc.get('world_size', 1)}, {doc.get('device', '?')}"]
    failed = [ev for ev in events if ev.get("failed")]
    if failed:
        f = failed[-1]
        lines.append(f"# out of memory: {fmt_bytes(f['bytes'])} ({f['category']}) asked in phase {f.get('phase')}, "
                     f"{place(f)}")
    if peak_at is None:
        lines.append("# nothing was allocated")
        return "\n".join(lines)
    e = events[peak_at]
    lines.append(f"# peak {fmt_bytes(peak)} ({peak} B) at event {peak_at} (t {e['t_ms']:.3f} ms), phase "
                 f"{e.get('phase')}, {place(e)}; {len(alive)} allocations alive")
    stated = (doc.get("peak") or {}).get("bytes")
    if stated is not None and stated != peak:
        lines.append(f"# note: the document states a peak of {stated} B; the replayed one is {peak} B")
    lines.append(f"# largest {min(top, len(alive))} allocations alive at the peak")
    fmt = "{:>5} {:>12} {:>14} {:>14} {:>16} {:>12} {:>8} {:>8}"
    lines.append("#" + fmt.format("rank", "size", "bytes", "category", "phase", "block", "id", "event")[1:])
    for n, a in enumerate(alive[:top], 1):
        lines.append(fmt.format(n, fmt_bytes(a["bytes"]), a["bytes"], a["category"], str(a.get("phase")), place(a),
                                a["id"], a["index"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="a memory timeline written by profile.memory_timeline")
    ap.add_argument("-o", "--output", help="PNG to write (default: PATH with .png for .json)")
    ap.add_argument("--title", help="plot title (default: the file name and device)")
    ap.add_argument("--x", choices=["index", "time"], default="index",
                    help="x axis: event index (default) or host time in ms")
    ap.add_argument("--top", type=int, default=10, help="allocations alive at the peak to list (default 10)")
    args = ap.parse_args(argv)
    prog = "plot_memory.py"
    try:
        if args.top < 0:
            raise BadInput(f"--top must be >= 0, got {args.top}")
        doc = load(args.path)
        out = args.output or (args.path[:-5] if args.path.endswith(".json") else args.path) + ".png"
        out_dir = Path(out).resolve().parent
        if not out_dir.is_dir():
            raise BadInput(f"the output directory '{out_dir}' does not exist")
        check_output(out, [args.path], "-o")
        rows, peak, peak_at, alive = replay(doc)
        title = args.title or f"{Path(args.path).name}: {doc.get('device', '')}, peak {fmt_bytes(peak)}"
        plot(doc, rows, peak, peak_at, out, title, args.x)
    except BadInput as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(report(args.path, doc, peak, peak_at, alive, args.top))
    print(f"# wrote {out}")
    return 0


if __name__ == "__main__":
    import signal
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `plot_memory.py ... | head`: stop quietly when the reader does
    sys.exit(main())
