#!/usr/bin/env python3
"""Per-step loss agreement of trainer result records with a reference record (e.g. N-GPU strategies vs 1 GPU on the
same global batch).

    launch/loss_match.py REF.json A.json B.json ...

Prints, for each record, its strategy, the final loss, and the largest relative difference |a - ref| / |ref| over the
steps both have (and the step where it occurs, numbered from 1 as in the trainer's log). Steps are matched by their
number: a resumed run's record holds the steps after steps.first (its checkpoint's step), so a resumed leg is compared
with an uninterrupted run on the steps after its checkpoint; the row names the steps compared when they are not all of
both records'. An interrupted run's losses are valid: a record or reference with status interrupted is compared on the
steps both have. A record whose config differs from the reference's in a key that changes the numbers (precision, the
schedule and its length, the optimizer's settings, model, global batch, data, initial weights, their files compared as
the runs read them: the real paths of the records' inputs section (the path as typed where a record has none); not the
initial weights where either record resumed from a checkpoint: its weights came from there, though init.seed still
counts under bf16_pure's stochastic rounding, which it seeds at every step) is marked "not comparable", naming the keys;
a resumed leg whose run warned that its config differs from the checkpoint's (the record's warnings) says so; one that
differs where only the rounding does (device, attention, fp32_matmul, reduce_dtype) says so. Exit codes: 0 when every
record compared; 1 if a record (the reference included) failed (status error, oom, running, ...; a failed reference is
one line "loss_match: error: the reference ..." on stderr and nothing else), or a record other than the reference has no
per-step losses, no step in common with the reference or, neither of the two interrupted, ends at another step (a
finished run of another length; a row says which, and what in the configs differs); 2 on bad input, one line
"loss_match: error: ..." on stderr before anything is printed: a file that cannot be read, is not a JSON object or not
a trainer result record (schema trainer.result/...: a plan or a memory timeline is not), a reference without per-step
losses, a record to compare without its config section, per-step losses that are not numbers, a steps.first that is
not a step number; or fewer than two files (a usage line). Records are named by file name, with as many parent
folders as make the names unique where two share one (r1/run.json, r2/run.json; the same file twice keeps its name). A
strategy a record lacks shows as "-". Standard library only."""
import json
import math
import pathlib
import sys

from records import FIELD_ERRORS, file_labels  # this folder: the records helpers


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
    schema = r.get("schema")
    if not (isinstance(schema, str) and schema.startswith("trainer.result/")):
        what = f"its schema is {schema}" if isinstance(schema, str) else "no schema"
        die(f"'{path}' is not a trainer result record ({what}; a record's is trainer.result/1)")
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
    """The step its losses follow (steps.first: a resumed run's checkpoint step; 0 when absent). Dies (exit 2) when a
    finished record with per-step losses lacks what the comparison reads: its config section, per-step losses that
    are all numbers, or a steps.first that is a step number."""
    if not isinstance(r.get("config"), dict):
        die(f"'{path}': 'config' is {'null' if 'config' in r else 'missing'} (a hand-edited or partial record?): "
            "cannot tell whether its run is comparable")
    if (not isinstance(losses, list) or
                   not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in losses)):
        die(f"'{path}': loss.per_step is not a list of numbers")
    first = section(r, "steps").get("first") or 0  # as launch/plot.py's loss kind reads it
    if not isinstance(first, int) or isinstance(first, bool) or first < 0:
        die(f"'{path}': steps.first is {first!r}, not a step number")
    return first


def section(d, key):
    """d[key] when it is an object, else {} (a section missing or null)."""
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, dict) else {}


class InputFile:
    """A file a run read, as it compares with another record's: by the real paths the trainer recorded (the record's
    inputs section: symlinks, ./ and ../ resolved, so runs started from other directories compare equal) where both
    records have them, else by the path as typed in the config."""

    def __init__(self, r, key, typed):
        self.typed = typed
        real = section(r, "inputs").get(key)
        self.real = real if isinstance(real, str) else None

    def __eq__(self, other):
        if not isinstance(other, InputFile):
            return NotImplemented
        if self.real is not None and other.real is not None:
            return self.real == other.real
        return self.typed == other.typed

    def __hash__(self):
        return hash(self.typed)


def strategy(r):
    return str(section(section(r, "config"), "parallel").get("strategy") or "-")


def setup(r):
    """{name: value} of what must agree for curves to be comparable, read from the resolved config the record
    carries: every key that changes the numbers, as the trainer's resume check counts them (the strategy, world
    size and microbatches change only the order of the sums). Warm-up, the cosine cycle's length and min_lr count
    with schedule cosine (constant leaves them unused); the length is cosine_steps, or with cosine_steps 0 the run's
    (bench.warmup_steps + measure_steps, counted from step 0 in a resumed run too)."""
    c = section(r, "config")
    o = section(c, "optimizer")
    d = section(c, "data")
    b = section(c, "bench")
    i = section(c, "init")
    cosine = o.get("schedule") == "cosine"
    run = [b.get("warmup_steps", 0), b.get("measure_steps")]
    run = sum(run) if all(isinstance(x, int) for x in run) else None
    return {"precision": c.get("precision"), "schedule": o.get("schedule"), "lr": o.get("lr"),
            "warm-up": o.get("warmup_steps") if cosine else None,
            "cosine length": (o.get("cosine_steps") or run) if cosine else None,
            "min_lr": o.get("min_lr") if cosine else None, "betas": o.get("betas"), "eps": o.get("eps"),
            "weight_decay": o.get("weight_decay"), "max_grad_norm": o.get("max_grad_norm"),
            "stochastic rounding": o.get("stochastic_rounding") if c.get("precision") == "bf16_pure" else None,
            "model": section(section(r, "model"), "dims"),
            "rope_theta": section(c, "model").get("rope_theta"), "global batch": d.get("batch_size"),
            "data": (d.get("source"), *((InputFile(r, "data.path", d.get("path")), d.get("dtype"))
                                        if d.get("source") == "tokens" else (None, None)),
                     d.get("sampling"), d.get("seed")),
            "init seed": i.get("seed"), "init weights": InputFile(r, "init.weights", i.get("weights"))}


def rounding(r):
    """{name: value} of the keys that change only the rounding of the numbers (as a strategy does)."""
    c = section(r, "config")
    return {"device": c.get("device"), "attention": c.get("attention"), "fp32_matmul": c.get("fp32_matmul"),
            "reduce_dtype": section(c, "parallel").get("reduce_dtype")}


def resumed(r):
    """Whether record r's run resumed from a checkpoint (its weights and AdamW state came from there)."""
    return bool(section(r, "checkpoint").get("resumed_from"))


def seeds_rounding(r):
    """Whether init.seed seeds record r's run after its start too: bf16_pure's stochastic rounding (as the
    trainer's resume check counts it)."""
    c = section(r, "config")
    return c.get("precision") == "bf16_pure" and section(c, "optimizer").get("stochastic_rounding") is not False


def differ(what, a, b):
    """The names whose values differ between records a and b in what(record). Where either resumed from a
    checkpoint, its initial weights came from there: the init keys do not count (the checkpoint's own config is
    not in the record), except init.seed where it seeds the stochastic rounding of every step."""
    x, y = what(a), what(b)
    skip = set()
    if resumed(a) or resumed(b):
        skip = {"init weights"} if seeds_rounding(a) or seeds_rounding(b) else {"init seed", "init weights"}
    return [n for n in x if x[n] != y[n] and n not in skip]


def steps(first, n):
    """'steps 26-45' for n losses after step `first` ('step 26' for one)."""
    return f"step {first + 1}" if n == 1 else f"steps {first + 1}-{first + n}"


def rel_diff(a, ref):
    if ref:
        return abs(a - ref) / abs(ref)
    return 0.0 if a == ref else math.inf


def main(argv):
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print("usage: launch/loss_match.py REF.json A.json [B.json ...]  (--help: what it prints)", file=sys.stderr)
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
    ref_first = check(argv[0], ref_rec, ref)
    records = []
    for path in argv[1:]:
        rec, l = load(path)
        first = check(path, rec, l) if l and not failure(path, rec) else 0  # (without losses: a row says so)
        records.append((path, rec, l, first))
    # labels: the file names, with as many parent folders as make them unique (r1/run.json, r2/run.json)
    names = file_labels(argv[1:], suffix=True)
    c = section(ref_rec, "config")
    o = section(c, "optimizer")
    p, sch, lr, wu = ("-" if x is None else x
                      for x in (c.get("precision"), o.get("schedule"), o.get("lr"), o.get("warmup_steps")))
    cut = " (interrupted)" if ref_rec.get("status") == "interrupted" else ""
    span = f" ({steps(ref_first, len(ref))})" if ref_first else ""
    print(f"reference {argv[0]}: {len(ref)} steps{span}{cut}, final loss {ref[-1]:.5f} ({p}, schedule {sch}, "
          f"lr {lr}, warm-up {wu}, strategy {strategy(ref_rec)})")
    print(f"{'record':44s} {'strategy':14s} {'final':>9s} {'max rel diff':>13s} {'at step':>7s}")
    status = 0
    for name, (path, rec, l, first) in zip(names, records):
        if why := failure(path, rec):
            print(f"{name:44s} {why}")
            status = 1
            continue
        if not l:
            print(f"{name:44s} no per-step losses ("
                  + ("interrupted before its first step)" if rec.get("status") == "interrupted" else
                     "not a trainer train record?)"))
            status = 1
            continue
        # Steps are matched by number (a resumed run's losses follow steps.first): compared where both have them.
        interrupted = "interrupted" in (rec.get("status"), ref_rec.get("status"))
        unlike = [f"not comparable: different {', '.join(d)}" for d in [differ(setup, rec, ref_rec)] if d]
        if first + len(l) != ref_first + len(ref) and not interrupted:
            print(f"{name:44s} {steps(first, len(l))}, the reference has {steps(ref_first, len(ref))} (finished "
                  "runs of different lengths)" + "".join(f"  ({n})" for n in unlike))
            status = 1
            continue
        lo, hi = max(first, ref_first), min(first + len(l), ref_first + len(ref))  # steps lo + 1 .. hi
        if lo >= hi:
            print(f"{name:44s} no step in common: it has {steps(first, len(l))}, the reference has "
                  f"{steps(ref_first, len(ref))}")
            status = 1
            continue
        rel = [rel_diff(a, b) for a, b in zip(l[lo - first:hi - first], ref[lo - ref_first:hi - ref_first])]
        k = max(range(len(rel)), key=rel.__getitem__)
        notes = unlike + [f"rounding differs: different {', '.join(d)}" for d in [differ(rounding, rec, ref_rec)] if d]
        # a leg whose resume warned that its config differs from the checkpoint's (a key of the checkpoint's run,
        # which the reference's config cannot show: the cosine cycle's length, say)
        warnings = rec.get("warnings")
        for w in warnings if isinstance(warnings, list) else []:
            if isinstance(w, str) and w.startswith("init.resume: the config differs from the checkpoint's"):
                notes.append("its resume warned: " + w.removeprefix("init.resume: ").split(": the run continues")[0])
        if (first, len(l)) != (ref_first, len(ref)):
            notes.append(f"{'interrupted: ' if rec.get('status') == 'interrupted' else ''}compared "
                         f"{steps(lo, hi - lo)}; it has {steps(first, len(l))}, the reference "
                         f"{steps(ref_first, len(ref))}")
        print(f"{name:44s} {strategy(rec):14s} {l[-1]:9.5f} {rel[k]:13.2e} {lo + k + 1:7d}"
              + "".join(f"  ({n})" for n in notes))
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # piped into head
        sys.stderr.close()
    except FIELD_ERRORS as e:  # a field of another type or shape
        die(f"a record holds a field of another type than a result record's ({type(e).__name__}: {e}): was it "
            "edited?")
