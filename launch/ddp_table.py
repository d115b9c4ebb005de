#!/usr/bin/env python3
"""Data-parallel summary table from trainer result records (DDP variants and ZeRO-1 on one or more GPUs).

    launch/ddp_table.py --one results/h200x2/2026-11-30/v1/xl_1gpu.json \\
        results/h200x2/2026-11-30/v1/xl_2gpu_*.json [--torch T.json ...]

For each record: strategy (bucket size), ranks, step mean ± std, the planner's step (timing.predicted.step_ms, GPU
records of 2026-12-06 on; "-" without one), forward/backward/optimizer, communication time and
the part of it exposed (the compute stream waiting; this counts every wait around a collective, the host all-reduce
of the gradient norm of zero1 and fsdp included, which the communication time does not, so it can exceed it),
scaling efficiency = (1-GPU step) / (N-GPU step) at equal per-GPU batch, model and precision (--one gives the 1-GPU
record; a row that differs from it in rows per GPU, model dims, context length or precision gets no efficiency, with
a note on stderr saying why), peak memory of the largest rank and optimizer state per rank (GiB, or MiB when every
size in the table is below 1 GiB, as memory_table.py; the header says which). torch_bench.py records (--torch) are
listed with their step and peak. A failed run (status running, oom, error, ...) is a row with its status and error
(cut at a word boundary with "…" when long); an interrupted run that measured steps shows its numbers, the row
ending with its status (as --one too: its measured steps are the base, with a note). The step time of a single
measured step has no "± std". A value or section a record lacks (hand-edited or partial records) shows as "-".
Inputs that are not trainer result records of job train (memory timelines, records of the benchmark jobs) are
skipped with a note on stderr. Rows are named by file name, with as many parent folders as make the names unique
where two files share one (r1/run, r2/run; the same file twice keeps its name).
Bad input (an unreadable file, a --torch file that is not a torch_bench.py record, a record without its status or
job, a --one record that is not a 1-rank train run that finished or measured steps, no train record at all) is one
line "ddp_table: error: ..." on stderr and exit code 2, before anything is printed. Standard library only.
"""
import argparse
import json
import os
import pathlib
import sys

from records import clip, file_labels, get, mean_std, number as num, size_unit  # this folder: the records helpers


def die(msg):
    print(f"ddp_table: error: {msg}", file=sys.stderr)
    sys.exit(2)


def ms(r, key):
    return num(get(r, "timing", key, "mean_ms"))


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def need(path, r, key, what):
    """Dies naming the file and `key` when the record has it missing or null."""
    if r.get(key) is None:
        die(f"{what} '{path}': '{key}' is {'null' if key in r else 'missing'} (a hand-edited or partial record?)")


def status_text(r):
    """'ok', 'running', 'oom (out of memory ...)': the status and, when the record has one, its error (clipped)."""
    err = r.get("error")
    return f"{r['status']}" + (f" ({clip(err, 100)})" if err else "")


def is_trainer_record(r):
    return str(r.get("schema", "")).startswith("trainer.result/")


def load(path, what):
    try:
        r = json.loads(pathlib.Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"cannot read {what} '{path}': {e}")
    if not isinstance(r, dict):
        die(f"{what} '{path}' is not a JSON object (a result record is)")
    return r


def per_gpu_rows(r):
    """Rows of the batch each rank processes per step (the global batch over the ranks); None when unknown."""
    b = num(get(r, "config", "data", "batch_size"))
    return None if b is None else b // (num(r.get("world_size")) or 1)


DIMS = ("d_model", "d_ff", "num_layers", "num_heads", "vocab_size", "context_length")


def model_of(r):
    """{key: value} of what the step time depends on besides the layout: the model's dims, context length included
    (model.dims, else config.model), and the precision; None where the record lacks one."""
    dims = get(r, "model", "dims")
    dims = dims if isinstance(dims, dict) else get(r, "config", "model") or {}
    return {**{k: dims.get(k) if isinstance(dims, dict) else None for k in DIMS},
            "precision": get(r, "config", "precision")}


def model_differences(r, one):
    """'d_model 1600, the --one record 64; precision bf16, the --one record fp32': the keys that record r and the
    --one record both give and that differ."""
    a, b = model_of(r), model_of(one)
    return "; ".join(f"{k} {a[k]}, the --one record {b[k]}" for k in a
                     if a[k] is not None and b[k] is not None and a[k] != b[k])


def step_cell(step):
    """'    80.0 ±   0.5' (mean ± std, ms), the mean alone for one sample (its std says nothing), '-' without one."""
    return mean_std(step, "8.1f", "5.1f", align=True) or "-"


def strategy_name(r):
    p = get(r, "config", "parallel") or {}
    name = str(p.get("strategy") or "-")
    if name == "ddp_bucketed" and num(p.get("bucket_mb")) is not None:
        name += f" {p['bucket_mb']:g} MiB"
    if p.get("reduce_dtype") not in (None, "fp32", "f32"):
        name += f" ({p['reduce_dtype']})"
    return name


def peak_bytes(r):
    """The largest rank's peak (memory.per_rank), else memory.peak_bytes; None when the record has neither."""
    ranks = get(r, "memory", "per_rank")
    peaks = [num(p.get("peak_bytes")) for p in ranks if isinstance(p, dict)] if isinstance(ranks, list) else []
    peaks = [p for p in peaks if p is not None]
    return max(peaks) if peaks else num(get(r, "memory", "peak_bytes"))


def trainer_row(label, path, r, one, base, notes):
    """("row", label, strategy, ranks, step cell, planned step ms, [fwd, bwd, opt, comm, exposed ms], efficiency,
    peak bytes, optimizer state bytes, mark) for a finished run or an interrupted one that measured steps (mark: its
    status, else ""), or ("text", label, strategy, ranks, text): its status and error, or "(no measured steps)"."""
    name, n = strategy_name(r), num(r.get("world_size")) or 1
    step = get(r, "timing", "step")
    mean = num(get(step, "mean_ms"))
    if r["status"] != "ok" and (r["status"] != "interrupted" or mean is None):
        return ("text", label, name, n, status_text(r))
    if isinstance(step, dict) and mean is None:
        return ("text", label, name, n, "(no measured steps)")
    eff = base / mean if base and mean and n > 1 else None
    if eff is not None and per_gpu_rows(r) != per_gpu_rows(one):
        if per_gpu_rows(r) is None or per_gpu_rows(one) is None:
            which = path if per_gpu_rows(r) is None else "the --one record"
            notes.append(f"# {label}: config.data.batch_size missing in {which}: per-GPU batch unknown, "
                         "no efficiency")
        else:
            notes.append(f"# {label}: {per_gpu_rows(r)} rows per GPU, the --one record {per_gpu_rows(one)}: "
                         "no efficiency")
        eff = None
    if eff is not None and (differ := model_differences(r, one)):
        notes.append(f"# {label}: {differ}: another model, no efficiency")
        eff = None
    return ("row", label, name, n, step_cell(step), num(get(r, "timing", "predicted", "step_ms")),
            [ms(r, k) for k in ("forward", "backward", "optimizer", "comm", "comm_exposed")],
            eff, peak_bytes(r), num(get(r, "memory", "optimizer_state_bytes")),
            "" if r["status"] == "ok" else status_text(r))


def torch_row(stem, t):
    """As trainer_row for a torch_bench.py record: its step and peak only (None for the phases)."""
    c = t.get("config") if isinstance(t.get("config"), dict) else {}
    n = num(c.get("world_size")) or 1
    label = f"torch {c.get('mode') or '-'}" + (f" DDP {c.get('bucket_cap_mb') or '-'} MB" if n > 1 else "")
    if t["status"] != "ok":
        return ("text", stem, label, n, status_text(t))
    return ("row", stem, label, n, step_cell(get(t, "timing", "step")), None, None, None,
            num(get(t, "memory", "peak_bytes")), None, "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="+", help="trainer result records of job train")
    ap.add_argument("--one", help="the 1-GPU record at the same per-GPU batch (for scaling efficiency)")
    ap.add_argument("--torch", nargs="*", default=[], help="torch_bench.py records to list alongside")
    args = ap.parse_args()
    # Everything is read and checked before anything is printed: bad input is one line on stderr and exit 2.
    notes, rows = [], []
    one = base = None
    if args.one:
        one = load(args.one, "--one record")
        if not is_trainer_record(one) or one.get("job") != "train" or (num(one.get("world_size")) or 1) != 1:
            die(f"--one '{args.one}' must be a 1-rank trainer train record")
        need(args.one, one, "status", "--one record")
        base = ms(one, "step")
        if one["status"] != "ok" and (one["status"] != "interrupted" or base is None):
            die(f"--one '{args.one}' is not a finished run (status {one['status']}"
                + (f": {one['error']})" if one.get("error") else ")"))
        if one["status"] == "interrupted":  # its measured steps are valid
            notes.append(f"# --one record '{args.one}' is an interrupted run: the steps it measured give the 1-GPU "
                         "step time")
        if base is None:
            notes.append(f"# --one record '{args.one}' has no step time (timing.step.mean_ms): no efficiency")
    trainer = ([(args.one, one)] if one else [])
    for p in args.records:
        if one and os.path.exists(p) and os.path.samefile(p, args.one):
            continue  # the --one record matched by the glob too: one row
        r = load(p, "record")
        if not is_trainer_record(r):
            schema = str(r.get("schema", ""))
            kind = ("a torch_bench record (pass it with --torch)" if schema.startswith("torch_bench") else
                    "a memory timeline (profile.memory_timeline), not a result record"
                    if schema.startswith("trainer.memory_timeline") else
                    "not a trainer result record (no trainer.result schema; a config file?)")
            notes.append(f"# skipped {p}: {kind}")
            continue
        need(p, r, "job", "record")
        if r["job"] != "train":
            notes.append(f"# skipped {p}: a record of job {r['job']!r}, not train")
            continue
        need(p, r, "status", "record")
        trainer.append((p, r))
    torch = []
    for p in args.torch:
        t = load(p, "--torch record")
        if not str(t.get("schema", "")).startswith("torch_bench.result/"):
            die(f"--torch '{p}' is not a torch_bench.py record (schema torch_bench.result/1)"
                + (": pass a trainer record without --torch" if is_trainer_record(t) else ""))
        need(p, t, "status", "--torch record")
        torch.append((p, t))
    if not trainer and not torch:
        skipped = [n.removeprefix("# skipped ") for n in notes if n.startswith("# skipped ")]
        die("no trainer train record among the inputs" + (f" (skipped {skipped[0]})" if len(skipped) == 1 else
                                                          f" ({len(skipped)} skipped, e.g. {skipped[0]})" if skipped
                                                          else ""))
    # rows are named by file name, with as many parent folders as make them unique (r1/run, r2/run)
    labels = dict(zip([p for p, _ in trainer + torch], file_labels([p for p, _ in trainer + torch])))
    for p, r in trainer:
        try:
            rows.append(trainer_row(labels[p], p, r, one, base, notes))
        except (TypeError, ValueError, AttributeError, KeyError) as e:  # a value of an unexpected type
            die(f"record '{p}': unexpected content ({type(e).__name__}: {e})")
    for p, t in torch:
        try:
            rows.append(torch_row(labels[p], t))
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            die(f"--torch record '{p}': unexpected content ({type(e).__name__}: {e})")

    sizes = [x for row in rows if row[0] == "row" for x in row[8:10] if x is not None]
    unit, scale = size_unit(sizes)
    size = lambda x, width: f"{fmt(None if x is None else x / scale, '.2f'):>{width}s}"
    w = max([len(row[1]) for row in rows] + [len("record")])
    for line in notes:
        print(line, file=sys.stderr)
    print(f"{'record':{w}s} {'strategy':27s} {'ranks':>5s} {'step ms':>16s} {'plan':>6s} {'fwd':>6s} {'bwd':>6s} "
          f"{'opt':>6s} {'comm':>6s} {'exposed':>7s} {'eff':>5s} {'peak ' + unit:>8s} {'opt ' + unit:>7s}")
    for row in rows:
        kind, label, name, n = row[:4]
        if kind == "text":
            print(f"{label:{w}s} {name:27s} {n:5} {row[4]}")
            continue
        step, plan, phases, eff, peak, opt, mark = row[4:]
        if phases is None:  # a torch_bench record: its step and peak only
            print(f"{label:{w}s} {name:27s} {n:5} {step:>16s} {'':>6s} {'':>6s} {'':>6s} {'':>6s} {'':>6s} {'':>7s} "
                  f"{'':>5s} {size(peak, 8)}")
            continue
        cells = " ".join(f"{fmt(x):>{width}s}" for x, width in zip(phases, (6, 6, 6, 6, 7)))
        print(f"{label:{w}s} {name:27s} {n:5} {step:>16s} {fmt(plan):>6s} {cells} {fmt(eff, '.3f'):>5s} "
              f"{size(peak, 8)} {size(opt, 7)}" + (f"  {mark}" if mark else ""))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
