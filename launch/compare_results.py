#!/usr/bin/env python3
"""Print result records (trainer.result/1, described in README.md: "Each run writes one result record") side by side.

    launch/compare_results.py results/xl_none.json results/xl_fsdp.json [...]
    launch/compare_results.py --markdown results/runs/*.json > results/table.md

One column per record, one row per field: status, the config summary (preset and dims, device, precision, attention,
strategy and comm, world size, batch), the machine, timing mean ± std per phase (ms), tokens/s, TFLOP/s per rank and
MFU, peak memory and its split by category at the peak, saved activations per block, and the final loss; for
collective_bench records, the bus bandwidth and time of every (op, size).
When there are several records, "vs first" rows give the step time and tokens/s relative to the first column.
A field a record lacks (or has null) shows as "-"; a long error message is cut at a word boundary with "…"; a time
of one sample has no "± std". Columns are named by file name, with as many parent folders as make the names unique
where two files share one (r1/run.json, r2/run.json; the same file twice keeps its name).
Bad input (a file that cannot be read, or is not a trainer or peer result record, or holds a value of another type
where a row reads a number or a section: a hand-edited record) is one line "compare_results: error: ..." on stderr
and exit code 2, before anything is printed. Standard library only.
Records of the PyTorch peer (launch/torch_bench.py, torch_bench.result/1) can stand beside the trainer's: their
config, machine, timing, tokens/s and peak memory map onto the same rows (job "peer", the name says the torch_bench
mode, phase and torch.compile mode; a forward or forward_backward record's time is its own row, not "step"; the
std is recomputed from its times with n - 1, as the trainer's), so "step time vs first" is the trainer / peer ratio
when the first record is the peer's train step:
    launch/compare_results.py results/.../torch_xl_ro.json results/.../xl1.json
"""
import argparse
import json
import statistics
import sys

from records import FIELD_ERRORS, clip, file_labels, get, mean_std, sample_count  # this folder: the records helpers

PHASES = ["forward", "backward", "optimizer", "step", "comm", "comm_exposed"]


def die(msg):
    print(f"compare_results: error: {msg}", file=sys.stderr)
    sys.exit(2)


def fmt_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_num(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def fmt_rate(x):
    if x is None:
        return "-"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.1f}"


def model_summary(r):
    cfg_model = get(r, "config", "model", default={})
    dims = get(r, "model", "dims", default=None) or cfg_model
    preset = cfg_model.get("preset") or "custom"
    changed = get(r, "model", "changed_from_preset", default={})
    if changed:  # a preset run with other dims: name them, so the label never claims the preset's shape
        preset += " (" + ", ".join(f"{k} {v.get('used')} not {v.get('preset')}" for k, v in changed.items()) + ")"
    if not isinstance(dims, dict) or dims.get("d_model") is None:  # (the peer's placeholder records have no dims)
        return preset
    d = lambda k: "?" if dims.get(k) is None else dims[k]
    return (f"{preset}: d_model {d('d_model')} d_ff {d('d_ff')} L {d('num_layers')} H {d('num_heads')} "
            f"V {d('vocab_size')} T {d('context_length')}")


def gemm_summary(r):
    """'on: 15 shapes, 11 changed, 2.14 -> 2.06 ms', 'off' or '- (cpu)' (records without the section: '-')."""
    g = r.get("gemm_autotune")
    if not isinstance(g, dict):
        return "-"
    if not g.get("enabled"):
        if get(r, "config", "device") != "cpu" and get(r, "config", "gemm_autotune") is False:
            return "off (deterministic)" if get(r, "config", "deterministic") is True else "off"
        return "- (cpu)"
    if g.get("shapes") is None:
        return "on"
    ms = lambda k: "?" if g.get(k) is None else f"{g[k]:.2f}"
    changed = "?" if g.get("changed") is None else g["changed"]
    return f"on: {g['shapes']} shapes, {changed} changed, {ms('heuristic_ms')} -> {ms('tuned_ms')} ms"


def device_summary(r):
    m = r.get("machine") or {}
    gpu = m.get("gpu_name") or m.get("gpu")
    desc = gpu or m.get("backend") or r.get("backend") or get(r, "config", "device")
    host = m.get("host")
    return f"{desc} @ {host}" if host and desc else (desc or host or "-")


def timing_cell(r, phase):
    """'80.00 ± 0.50 (n=3)', without '± std' for one sample; '-' without a mean."""
    t = get(r, "timing", phase)
    cell = mean_std(t, ".2f")
    return "-" if cell is None else f"{cell} (n={sample_count(t) or 0})"


def ratio(x, base):
    """x / base as "0.87x"; two significant digits below 0.1 (a tiny run beside xl: "0.0012x", not "0.00x")."""
    if x is None or not base:
        return "-"
    v = x / base
    return f"{v:.2f}x" if v == 0 or abs(v) >= 0.095 else f"{v:.2g}x"


def optimizer_summary(r):
    """When AdamW runs: after the backward, inside it per unit (optimizer.in_backward), or in the weight-gradient
    products (in_gemm); peer records: after the backward."""
    o = get(r, "config", "optimizer") or {}
    g = r.get("in_gemm")
    if isinstance(g, dict):  # the products the run fused (records since the 32nd session)
        if not g.get("fused_products"):
            return "in backward (in gemm: no product of >= {} elements)".format(g.get("min_elements"))
        return "in backward + in gemm ({} of {} products)".format(g.get("fused_products"), g.get("products"))
    if o.get("in_gemm"):
        return "in backward + in gemm"
    return "in backward" if o.get("in_backward") else "after backward"


def graph_summary(r):
    """Whether the steps replayed a CUDA graph (then timing has no forward / backward / optimizer split)."""
    g = r.get("cuda_graph")
    if not isinstance(g, dict) or not g:
        return "-"
    if "peer" in g:  # the PyTorch peer's: whether its torch.compile mode captures CUDA graphs
        return g["peer"]
    if g.get("used"):
        return f"from step {g.get('captured_step') or '?'} ({g.get('nodes') or '?'} nodes)"
    return "no: " + clip(g.get("why_not") or "?", 50)


def build_rows(records):
    """[(label, [cell per record])], in display order."""
    rows = []

    def row(label, fn, train_only=False):
        rows.append((label, [fn(r) if not train_only or r.get("job", "train") in ("train", "peer") else "-"
                             for r in records]))

    row("status", lambda r: str(r.get("status") or "-") + (f" ({clip(r['error'], 60)})" if r.get("error") else ""))
    row("job / name", lambda r: f"{r.get('job') or '-'} / {r.get('name') or '-'}")
    row("model", model_summary, train_only=True)
    row("parameters", lambda r: fmt_rate(get(r, "model", "parameters")))
    row("device", device_summary)
    row("precision", lambda r: f"{get(r, 'config', 'precision', default='-')}"
        + (f" {get(r, 'config', 'fp32_matmul')}" if get(r, "config", "fp32_matmul") not in (None, "ieee")
           else (" +tf32" if get(r, "config", "allow_tf32") else "")))
    row("attention", lambda r: get(r, "config", "attention", default="-"), train_only=True)
    row("gemm autotune", gemm_summary)
    row("cuda graph", graph_summary, train_only=True)
    row("checkpointing", lambda r: get(r, "config", "checkpointing", "policy", default="-"), train_only=True)
    row("optimizer update", optimizer_summary, train_only=True)
    row("strategy / comm", lambda r: f"{get(r, 'config', 'parallel', 'strategy', default='-')} / "
        f"{get(r, 'config', 'parallel', 'comm', default='-')}")
    row("world size", lambda r: str(get(r, "world_size", default="-")))
    row("batch (global / micro)", lambda r: f"{get(r, 'config', 'data', 'batch_size', default='-')} / "
        f"{get(r, 'steps', 'microbatch_size', default=get(r, 'config', 'data', 'microbatch_size', default='-'))}",
        train_only=True)
    # timing's phases are its statistics objects (timing.per_rank is a list of ranks, not a phase)
    phases = PHASES + sorted({p for r in records for p, t in (r.get("timing") or {}).items()
                              if p not in PHASES and isinstance(t, dict)})
    for p in phases:
        if any(get(r, "timing", p) for r in records):
            row(f"{p} ms (mean ± std)", lambda r, p=p: timing_cell(r, p))
    row("tokens/s", lambda r: fmt_rate(get(r, "throughput", "tokens_per_s")))
    row("TFLOP/s per rank", lambda r: fmt_num(get(r, "throughput", "model_tflops_per_gpu"), "{:.3g}"))
    row("MFU", lambda r: fmt_num(get(r, "throughput", "mfu"), "{:.1%}")
        + (f" of {get(r, 'throughput', 'peak_tflops'):.0f}" if get(r, "throughput", "peak_tflops") else ""))
    if len(records) > 1:
        base_step = get(records[0], "timing", "step", "mean_ms")
        base_tok = get(records[0], "throughput", "tokens_per_s")
        row("step time vs first", lambda r: ratio(get(r, "timing", "step", "mean_ms"), base_step))
        row("tokens/s vs first", lambda r: ratio(get(r, "throughput", "tokens_per_s"), base_tok))
    row("peak memory", lambda r: fmt_bytes(get(r, "memory", "peak_bytes")))
    cats = []
    for r in records:
        for c in get(r, "memory", "by_category", default={}):
            if c not in cats:
                cats.append(c)
    for c in cats:
        row(f"  {c} (at peak)", lambda r, c=c: fmt_bytes(get(r, "memory", "by_category", c)))
    row("optimizer state", lambda r: fmt_bytes(get(r, "memory", "optimizer_state_bytes")))
    row("saved act. per stored block", lambda r: fmt_bytes(get(r, "memory", "saved_activation_bytes_per_block")))
    row("final loss", lambda r: fmt_num(get(r, "loss", "final"), "{:.4f}"))
    # collective_bench records: bus bandwidth (nccl-tests definition) per op and size, and any wrong elements.
    keys = []
    for r in records:
        for c in get(r, "collective_bench", "results", default=[]):
            k = (c.get("op"), c.get("size_bytes"))
            if k not in keys:
                keys.append(k)
    for op, size in keys:
        def cell(r, op=op, size=size):
            for c in get(r, "collective_bench", "results", default=[]):
                if (c.get("op"), c.get("size_bytes")) == (op, size):
                    return (f"{c.get('busbw_gbs', 0):.1f} GB/s ({c.get('time_us_max', 0):.1f} us)"
                            + (f" {c['wrong']} WRONG" if c.get("wrong") else ""))
            return "-"
        row(f"{op} {fmt_bytes(size)} busbw", cell)
    return rows


def render_text(headers, rows):
    label_w = max(len("field"), *(len(label) for label, _ in rows))
    widths = [max(len(h), *(len(cells[i]) for _, cells in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(["field".ljust(label_w)] + [h.ljust(w) for h, w in zip(headers, widths)]).rstrip(),
             "  ".join(["-" * label_w] + ["-" * w for w in widths])]
    for label, cells in rows:
        lines.append("  ".join([label.ljust(label_w)] + [c.ljust(w) for c, w in zip(cells, widths)]).rstrip())
    return "\n".join(lines)


def render_markdown(headers, rows):
    esc = lambda s: s.replace("|", "\\|")
    lines = ["| field | " + " | ".join(map(esc, headers)) + " |", "|---" * (len(headers) + 1) + "|"]
    for label, cells in rows:
        lines.append(f"| {esc(label.strip())} | " + " | ".join(map(esc, cells)) + " |")
    return "\n".join(lines)


# torch_bench.py's modes: the precision row's text (autocast: bf16 compute with fp32 weights, as the trainer's bf16)
PEER_PRECISION = {"fp32": "fp32 (eager)", "bf16": "bf16 (autocast, eager)", "compiled": "bf16 (autocast, compiled)",
                  "compiled_pure": "bf16_pure (compiled)"}


def peer_timing(r, phase):
    """torch_bench's timing.step under the phase's name (train_step -> step), its std recomputed with n - 1 from
    times_ms (torch_bench writes the population std; the trainer's records the sample std)."""
    t = get(r, "timing", "step")
    if not isinstance(t, dict):
        return None
    t = dict(t)
    times = t.get("times_ms")
    if isinstance(times, list) and len(times) > 1:
        t["std_ms"] = statistics.stdev(times)
    return {"step" if phase in (None, "train_step") else phase: t}


# torch.compile modes that capture CUDA graphs (the "cuda graph" row)
PEER_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def peer_as_record(r):
    """A torch_bench.result/1 record (the PyTorch peer) as the fields of a trainer record that the rows read."""
    c = r.get("config") or {}
    mode, phase, compile_mode = c.get("mode"), c.get("phase"), c.get("compile_mode")
    name = f"torch_bench {mode or '?'} {phase or '?'}" + (f", torch.compile {compile_mode}" if compile_mode else "")
    dims = {"d_model": c.get("d_model"), "d_ff": c.get("d_ff"), "num_layers": c.get("num_layers"),
            "num_heads": c.get("num_heads"), "vocab_size": c.get("vocab"), "context_length": c.get("ctx")}
    graph = (f"yes (torch.compile {compile_mode})" if compile_mode in PEER_GRAPH_MODES
             else "no" if compile_mode or mode in PEER_PRECISION else None)
    return {
        "status": r.get("status"), "error": r.get("error"), "job": "peer", "name": name,
        "config": {"model": {"preset": c.get("preset")}, "precision": PEER_PRECISION.get(mode, mode),
                   "attention": c.get("attention"),
                   "checkpointing": {"policy": {"block": "block (every block: the trainer's full)"}.get(
                       c.get("checkpoint"), c.get("checkpoint"))},
                   "parallel": {"strategy": c.get("parallel"), "comm": c.get("backend")},
                   "data": {"batch_size": c.get("global_batch") or c.get("batch")}},
        # a placeholder record (timeout, a subprocess that died) has no dims: the preset alone then
        "model": {"parameters": get(r, "model", "params"),
                  "dims": dims if dims["d_model"] is not None else None},
        "machine": r.get("machine"), "world_size": c.get("world_size") or 1, "timing": peer_timing(r, phase),
        "throughput": r.get("throughput"), "memory": {"peak_bytes": get(r, "memory", "peak_bytes")},
        "cuda_graph": {"peer": graph} if graph else None,
    }


# What the rows read, by dotted key (a trainer record's, or a peer's as written; "*": every key of the object above):
# objects (TRAINER_OBJECTS: in a trainer record; the peer's config.optimizer is a name), and numbers
OBJECTS = ("config", "model", "machine", "timing", *(f"timing.{p}" for p in PHASES), "throughput", "memory",
           "memory.by_category", "collective_bench", "collective_bench.results.*")
TRAINER_OBJECTS = ("config.model", "config.optimizer", "model.changed_from_preset", "model.changed_from_preset.*")
NUMBERS = ("timing.*.mean_ms", "timing.*.std_ms", "timing.step.times_ms.*",
           "throughput.tokens_per_s", "throughput.model_tflops_per_gpu", "throughput.mfu", "throughput.peak_tflops",
           "memory.peak_bytes", "memory.by_category.*", "memory.optimizer_state_bytes",
           "memory.saved_activation_bytes_per_block", "loss.final", "model.parameters", "model.params",
           "gemm_autotune.heuristic_ms", "gemm_autotune.tuned_ms", "collective_bench.results.*.size_bytes",
           "collective_bench.results.*.busbw_gbs", "collective_bench.results.*.time_us_max")


def values(r, dotted):
    """[(key, value)] at the dotted key of r, "*" standing for every key (or item) there; none where a level is
    missing, null or of another type (that level is checked on its own)."""
    found = [("", r)]
    for k in dotted.split("."):
        step = []
        for at, v in found:
            if k != "*":
                items = [(k, v.get(k))] if isinstance(v, dict) else []
            else:
                items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else []
            step += [(f"{at}.{i}".lstrip("."), x) for i, x in items if x is not None]
        found = step
    return found


def check(path, r, peer):
    """Dies naming the file and the key where a value the rows read has another type (a hand-edited record)."""
    objects = OBJECTS + (() if peer else TRAINER_OBJECTS)
    for dotted, want, what in [("collective_bench.results", list, "a list"), *((d, dict, "an object") for d in objects),
                               *((d, (int, float), "a number") for d in NUMBERS)]:
        for key, v in values(r, dotted):
            if not isinstance(v, want) or isinstance(v, bool):
                die(f"'{path}': {key} is {json.dumps(v)[:40]}, not {what} (a hand-edited record?)")


def load(path):
    """The record at `path`: a trainer result record, or a torch_bench one as peer_as_record makes it."""
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        die(f"cannot read '{path}': {e}")
    schema = str(r.get("schema", "")) if isinstance(r, dict) else ""
    if not schema.startswith(("trainer.result/", "torch_bench.result/")):
        die(f"'{path}' is not a trainer result record (schema trainer.result/1) nor a PyTorch peer's "
            "(torch_bench.result/1)")
    peer = schema.startswith("torch_bench.result/")
    check(path, r, peer)
    return peer_as_record(r) if peer else r


def readable(r):
    """Whether the rows can be built from record r alone."""
    try:
        render_text(["r"], build_rows([r]))
        return True
    except FIELD_ERRORS:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description="Side-by-side table of trainer result records (and the PyTorch "
                                 "peer's, launch/torch_bench.py).",
                                 epilog="Bad input (a file that cannot be read, or is not a trainer or peer result "
                                 "record) is one line on stderr and exit code 2.")
    ap.add_argument("records", nargs="+", help="result record JSON files")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    records = [load(p) for p in args.records]
    headers = file_labels(args.records, suffix=True)  # r1/run.json, r2/run.json where two share a file name
    try:
        rows = build_rows(records)
        text = render_markdown(headers, rows) if args.markdown else render_text(headers, rows)
    except FIELD_ERRORS as e:  # a field of another type or shape than check() looks at: name the first such record
        bad = next((p for p, r in zip(args.records, records) if not readable(r)), "a record")
        die(f"'{bad}': a field of another type than a result record's ({type(e).__name__}: {e}; a hand-edited "
            "record?)")
    try:
        print(text)
    except BrokenPipeError:  # piped into head
        sys.stderr.close()


if __name__ == "__main__":
    main()
