"""Reading result records (trainer.result/1, torch_bench.result/1) in the table scripts (launch/compare_results.py,
launch/ddp_table.py, launch/memory_table.py, launch/loss_match.py) and launch/plot.py. Standard library only.
"""
import os
from pathlib import PurePath

GIB, MIB = 2 ** 30, 2 ** 20

# What reading a field of another type or shape than a result record's raises (a hand-edited record): the tools catch
# these to print one line and exit 2 instead of a traceback.
FIELD_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError)


def get(d, *keys, default=None):
    """d[k0][k1]... or `default` when any level is missing, null or not an object (a partial or failed record)."""
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return default
        d = d[k]
    return d


def number(x):
    """x when it is a number (not a bool), else None."""
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def size_unit(sizes):
    """("GiB", 2**30), or ("MiB", 2**20) when every one of `sizes` (bytes; None skipped) is below 1 GiB: the unit of
    a table's or a figure's sizes. GiB when there is none."""
    sizes = [s for s in sizes if s is not None]
    return ("GiB", GIB) if not sizes or max(sizes) >= GIB else ("MiB", MIB)


def file_labels(paths, suffix=False):
    """The names of the records read from `paths`, in their order: their file names (without the suffix, .json, unless
    `suffix`), each with as many parent folders as make it unique (r1/run, r2/x/run, r3/x/run beside other; the folders
    of the absolute path: run.json and ../x/run.json are main/run and x/run). The same path given twice is one name.
    Where names without the suffix cannot differ (a/run.json, a/run.txt): the names with it."""
    full = [os.path.normpath(os.path.abspath(os.fspath(p))) for p in paths]
    parts = {f: (q if suffix or not q.name else q.with_suffix("")).parts for f in full for q in [PurePath(f)]}
    names = {}
    for f, p in parts.items():
        others = [q for g, q in parts.items() if g != f]
        n = next((n for n in range(1, len(p) + 1) if all(q[-n:] != p[-n:] for q in others)), None)
        if n is None:  # equal without the suffix (a/run.json, a/run.txt)
            return file_labels(paths, suffix=True)
        names[f] = str(PurePath(*p[-n:]))
    return [names[f] for f in full]


def clip(s, n):
    """s cut to at most n characters at a word boundary, with "…" when cut."""
    s = " ".join(str(s).split())
    if len(s) <= n:
        return s
    cut = s[:n]
    if s[n] != " " and " " in cut:  # mid-word: back to the last space
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:.-") + "…"


def sample_count(t):
    """The number of samples of a timing statistics object (the trainer's samples: the step times; torch_bench's: their
    count), None when it does not say."""
    n = get(t, "samples")
    return len(n) if isinstance(n, list) else number(n)


def mean_std(t, spec=".2f", std_spec=None, align=False):
    """'80.00 ± 0.50': the mean ± std (ms) of a timing statistics object {mean_ms, std_ms, samples} in `spec` (the
    std in `std_spec`, default `spec`; a null std as 0), or the mean alone when it is of one sample (the std of one
    sample says nothing), then (align) as many spaces as ' ± std' takes, so that a column lines up. None without a
    mean."""
    mean = number(get(t, "mean_ms"))
    if mean is None:
        return None
    std_spec = std_spec or spec
    if sample_count(t) == 1:
        return format(mean, spec) + (" " * len(f" ± {0:{std_spec}}") if align else "")
    return f"{mean:{spec}} ± {number(get(t, 'std_ms')) or 0:{std_spec}}"
