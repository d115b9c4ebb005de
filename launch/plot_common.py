"""Helpers shared by launch/plot.py and launch/plot_memory.py: the error type, byte formatting, the fixed colours of
the memory categories, and writing a figure atomically. Needs matplotlib only when a figure is made (Agg: no display).
"""
from __future__ import annotations

import os
import sys

# Colours per memory category, fixed so that plots of different runs compare at a glance.
COLORS = {"parameters": "#4c72b0", "gradients": "#dd8452", "optimizer": "#55a868", "activations": "#c44e52",
          "head": "#da8bc3", "workspace": "#8172b3", "communication": "#937860"}
DPI = 110


class BadInput(Exception):
    """Input the tool cannot use; main() prints `<prog>: error: <message>` and exits 2."""


def fmt_bytes(b: float) -> str:
    """As the trainer's format_bytes: '1.23 GiB', '512.0 MiB', '3.0 KiB', '12 B'."""
    b = float(b)
    if abs(b) >= 2 ** 30:
        return f"{b / 2 ** 30:.2f} GiB"
    if abs(b) >= 2 ** 20:
        return f"{b / 2 ** 20:.1f} MiB"
    if abs(b) >= 1024:
        return f"{b / 1024:.1f} KiB"
    return f"{int(b)} B"


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display needed); BadInput (one line) when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError as e:
        raise BadInput(f"matplotlib is not available to {sys.executable} ({e}); run with /usr/bin/python3 "
                       "(Debian's python3-matplotlib, which launch/setup.sh installs)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def same_file(a: str, b: str) -> bool:
    """Whether paths a and b name one file (through links, ./ or a hard link; an absent file by its real path)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(out: str, inputs, what: str = "the output") -> None:
    """BadInput (one line) when `out` names one of `inputs`: an output never overwrites an input."""
    for p in inputs:
        if same_file(out, p):
            raise BadInput(f"{what} '{out}' is also the input '{p}'; it would be overwritten: give another name")


def save_figure(fig, out: str, fmt: str | None = None) -> None:
    """Writes `fig` to the PNG `out` (fmt: another format of matplotlib's, 'pdf', 'svg') whole, then renames: never a
    half-written file. Closes the figure. BadInput (one line) when it cannot be written."""
    plt = pyplot()
    tmp = f"{out}.tmp.{os.getpid()}.{fmt or 'png'}"
    try:
        fig.savefig(tmp, format=fmt)
        os.replace(tmp, out)
    except OSError as e:
        raise BadInput(f"cannot write '{out}': {e.strerror or e}") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
