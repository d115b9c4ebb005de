"""launch/plot.py: every kind drawn from small synthetic result records (collective: records of job collective_bench).

Each drawing must give a valid PNG 1100 px wide, and what the figure holds (read back from its artists with
--dump-json) must equal the records' values, recomputed here from the records (losses per step, step ms and TFLOP/s
by parameter count, the comm split, the phase split, memory by category in GiB (MiB when every size is below 1 GiB)
and the planned peak; for ratio, from a manifest of synthetic trainer and peer records, the trainer / peer step
ratios by version and the two peaks). A failed run, and for the timing kinds a finished one without measured steps,
is a note (its error only when it has one); an interrupted run that measured steps is drawn with a note, as is a
record whose AdamW ran inside the backward (the note on the figure's foot too). Sweep lines split by the context,
batch and GPU where the records differ in them. JSON files that are not records (timelines, traces, PyTorch peer
records) are passed over, named or globbed; -o's suffix gives the format; --help's examples run. Bad input gives one
`plot.py: error:` line, exit 2 and no PNG. The trainer binary (TRAINER_BIN, else that test is skipped) writes a record,
a memory timeline and a trace into one folder, all drawn or passed over.
"""
import json
import os
import pathlib
import random
import struct
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PLOT = SRC / "launch" / "plot.py"
BIN = os.environ.get("TRAINER_BIN")
GIB, MIB = 2 ** 30, 2 ** 20

pytest.importorskip("matplotlib", reason="plot.py needs matplotlib (Debian: python3-matplotlib)")


def run_plot(*args, cwd=None):
    return subprocess.run([sys.executable, str(PLOT), *map(str, args)], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def stats(mean):
    return {"mean_ms": mean, "std_ms": 0.0, "min_ms": mean, "median_ms": mean, "max_ms": mean, "samples": [mean]}


def record(rng, *, preset="small", precision="bf16", phase="train_step", world_size=1, status="ok", steps=8,
           comm=None, exposed=None):
    """A trainer.result/1 record of job train with random values in the fields plot.py reads."""
    f, b, o = rng.uniform(1, 20), rng.uniform(20, 60), rng.uniform(5, 30)
    if phase == "forward":
        b = o = None
    step = f + (b or 0) + (o or 0) + rng.uniform(0, 3)
    cats = {"parameters": rng.randrange(GIB, 20 * GIB), "gradients": rng.randrange(GIB, 10 * GIB),
            "optimizer": rng.randrange(GIB, 30 * GIB), "activations": rng.randrange(0, 40 * GIB),
            "head": rng.randrange(0, GIB), "workspace": rng.randrange(0, GIB), "communication": 0}
    r = {"schema": "trainer.result/1", "job": "train", "status": status, "error": None, "world_size": world_size,
         "name": f"{preset}_{precision}",
         "config": {"precision": precision, "bench": {"phase": phase}, "model": {"preset": preset},
                    "parallel": {"strategy": "none" if world_size == 1 else "ddp_bucketed"}}}
    if status != "ok":
        r["error"] = "out of memory on cuda:0: asked for 47.81 GiB (optimizer)"
        return r
    r.update({
        "model": {"preset": preset, "parameters": rng.randrange(10 ** 8, 10 ** 10)},
        "timing": {"forward": stats(f), "backward": stats(b), "optimizer": stats(o), "step": stats(step)},
        "throughput": {"model_tflops_per_gpu": rng.uniform(50, 600), "mfu": rng.uniform(0.05, 0.8),
                       "tokens_per_s": 1e5, "peak_tflops": 756.0},
        "memory": {"peak_bytes": sum(cats.values()), "by_category": cats,
                   "predicted": {"peak_bytes": sum(cats.values()) + rng.randrange(-GIB, GIB)}},
        "loss": {"per_step": [rng.uniform(2, 10) for _ in range(steps)]},
    })
    r["loss"]["final"] = r["loss"]["per_step"][-1]
    if world_size > 1:
        r["timing"]["comm"] = stats(comm if comm is not None else rng.uniform(10, step))
        r["timing"]["comm_exposed"] = stats(exposed if exposed is not None else rng.uniform(0, 10))
    return r


def write(tmp_path, name, r):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(r))
    return p


def check_png(path, kind, n_records):
    """A PNG of the size plot.py --help states: 10 x H inches at 110 dpi."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    w, h = struct.unpack(">II", data[16:24])
    inches = {"loss": 5.5, "sweep": 5.0, "collective": 5.5}.get(kind, max(3.0, 1.6 + 0.34 * n_records))
    assert (w, h) == (1100, round(110 * inches))
    assert 5_000 < len(data) < 300_000


def draw(tmp_path, kind, paths, *extra, records=None):
    """Draws `paths` (of which `records` are records, default all), checks the PNG, returns the dump and the run."""
    out, dump = tmp_path / f"{kind}.png", tmp_path / f"{kind}.dump.json"
    p = run_plot(kind, *paths, "-o", out, "--dump-json", dump, *extra)
    assert p.returncode == 0, p.stderr
    check_png(out, kind, len(paths) if records is None else records)
    return json.loads(dump.read_text()), p


def bars_by_label(ax):
    """{record label: {segment: value}} from the dumped bars, matching each patch's y to the tick labels."""
    at = dict(zip(ax["yticks"], ax["yticklabels"]))
    out = {}
    for seg in ax["bars"]:
        for y, v in zip(seg["y"], seg["values"]):
            out.setdefault(at[y], {})[seg["segment"]] = v
    return out


def test_loss_curves(tmp_path):
    rng = random.Random(1)
    recs = {"a": record(rng, steps=5), "b": record(rng, steps=12), "c": record(rng, status="oom")}
    recs["b"]["loss"]["per_step"][3] = None   # a step without a loss is left out, not drawn as 0
    paths = [write(tmp_path, k, r) for k, r in recs.items()]
    d, p = draw(tmp_path, "loss", paths)
    lines = {ln["label"]: ln for ln in d["axes"][0]["lines"]}
    assert set(lines) == {"a", "b"}
    for k in ("a", "b"):
        want = [(i + 1, v) for i, v in enumerate(recs[k]["loss"]["per_step"]) if v is not None]
        assert list(zip(lines[k]["x"], lines[k]["y"])) == pytest.approx(want)
    assert any("c: status oom" in n for n in d["notes"]) and "not drawn: c" in p.stderr


def test_loss_of_a_resumed_run_at_its_step_numbers(tmp_path):
    # A run resumed from the checkpoint of step 6 records steps 7.. only (steps.first = 6): drawn at 7.., so that it
    # continues the first run's curve instead of starting over at 1.
    rng = random.Random(2)
    first, resumed = record(rng, steps=6), record(rng, steps=4)
    first["steps"], resumed["steps"] = {"first": 0, "total": 6}, {"first": 6, "total": 10}
    d, _ = draw(tmp_path, "loss", [write(tmp_path, "first", first), write(tmp_path, "resumed", resumed)])
    lines = {ln["label"]: ln for ln in d["axes"][0]["lines"]}
    assert lines["first"]["x"] == [1, 2, 3, 4, 5, 6]
    assert lines["resumed"]["x"] == [7, 8, 9, 10]
    assert lines["resumed"]["y"] == pytest.approx(resumed["loss"]["per_step"])
    bad = record(rng, steps=2)
    bad["steps"] = {"first": "six"}
    p = run_plot("loss", write(tmp_path, "bad", bad), "-o", tmp_path / "bad.png")
    assert p.returncode != 0 and "steps.first" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_sweep_by_size_and_precision(tmp_path):
    rng = random.Random(2)
    paths, recs = [], []
    for preset in ("small", "xl", "medium"):
        for prec in ("fp32", "bf16"):
            r = record(rng, preset=preset, precision=prec)
            recs.append(r)
            paths.append(write(tmp_path, f"{preset}_{prec}", r))
    paths.append(write(tmp_path, "10B_bf16", record(rng, preset="10B", status="oom")))
    for mfu in (False, True):
        d, _ = draw(tmp_path, "sweep", paths, *(["--mfu"] if mfu else []))
        step_ax, rate_ax = d["axes"]
        for prec in ("fp32", "bf16"):
            rs = sorted((r for r in recs if r["config"]["precision"] == prec), key=lambda r: r["model"]["parameters"])
            xs = [r["model"]["parameters"] / 1e9 for r in rs]
            (s,) = [ln for ln in step_ax["lines"] if ln["label"] == prec]
            (t,) = [ln for ln in rate_ax["lines"] if ln["label"] == prec]
            assert s["x"] == pytest.approx(xs) and t["x"] == pytest.approx(xs)
            assert s["y"] == pytest.approx([r["timing"]["step"]["mean_ms"] for r in rs])
            rate = [r["throughput"]["mfu"] * 100 if mfu else r["throughput"]["model_tflops_per_gpu"] for r in rs]
            assert t["y"] == pytest.approx(rate)
        assert d["notes"] == ["10B_bf16 (10B bf16): oom"]
    # records of one precision on 1 and 2 ranks: a line each (they had been joined into one)
    two = [write(tmp_path, f"{p}_2r", record(rng, preset=p, precision="bf16", world_size=2)) for p in ("small", "xl")]
    d, _ = draw(tmp_path, "sweep", [tmp_path / "small_bf16.json", tmp_path / "xl_bf16.json"] + two)
    labels = sorted(ln["label"] for ln in d["axes"][0]["lines"])
    assert labels == ["bf16, 1 rank none", "bf16, 2 ranks ddp_bucketed"]
    assert all(len(ln["x"]) == 2 for ln in d["axes"][0]["lines"])


def test_sweep_splits_lines_by_context_batch_and_gpu(tmp_path):
    # Records that differ in the context length, the batch or the GPU had been joined into one line per precision
    # (a vertical segment where two sat at one size); now each line is one setting, named by what differs.
    rng = random.Random(14)

    def rec(preset, ctx=512, batch=4, gpu="NVIDIA H200, 139.8 GiB, CUDA 13.0", status="ok"):
        r = record(rng, preset=preset, status=status)
        r["config"]["model"]["context_length"] = ctx
        r["config"]["data"] = {"batch_size": batch}
        if status == "ok":    # a run that failed before it opened the device has no backend
            r["backend"] = gpu
            r["model"]["parameters"] = {"small": 1.3e8, "xl": 3.4e9}[preset]
        return r

    recs = {"s512": rec("small"), "x512": rec("xl"), "x2048": rec("xl", ctx=2048), "x8192": rec("xl", ctx=8192),
            "oom": rec("xl", ctx=32768, status="oom")}
    d, _ = draw(tmp_path, "sweep", [write(tmp_path, k, r) for k, r in recs.items()])
    lines = {ln["label"]: ln for ln in d["axes"][0]["lines"]}
    assert list(lines) == ["bf16, ctx 512", "bf16, ctx 2048", "bf16, ctx 8192"]   # ctx by value
    assert lines["bf16, ctx 512"]["x"] == pytest.approx([0.13, 3.4])
    assert lines["bf16, ctx 512"]["y"] == pytest.approx([recs[k]["timing"]["step"]["mean_ms"]
                                                         for k in ("s512", "x512")])
    assert lines["bf16, ctx 2048"]["y"] == pytest.approx([recs["x2048"]["timing"]["step"]["mean_ms"]])
    assert d["notes"] == ["oom (xl bf16, ctx 32768): oom"] and d["info"] == []
    # the batch and the GPU (its name, not its memory or CUDA version) split the lines too
    recs = {"a": rec("small"), "b": rec("xl"), "c": rec("xl", batch=8), "d": rec("small", gpu="NVIDIA H100 80GB HBM3, "
                                                                                 "79.2 GiB, CUDA 13"),
            "e": rec("xl", gpu="NVIDIA H200, 139.8 GiB, CUDA 13.1")}
    d, p = draw(tmp_path, "sweep", [write(tmp_path, k, r) for k, r in recs.items()])
    got = {ln["label"]: len(ln["x"]) for ln in d["axes"][0]["lines"]}
    assert got == {"bf16, batch 4, NVIDIA H200": 3, "bf16, batch 8, NVIDIA H200": 1, "bf16, batch 4, NVIDIA H100 80GB "
                   "HBM3": 1}
    # b and e: one line at one size (they differ in nothing split on): a note says so, naming them
    assert d["info"] == ["b, e (xl bf16, batch 4, NVIDIA H200): several records of one line at one size: joined by a "
                         "vertical segment"]
    assert "several records of one line at one size" in flat(d["foot"][0])
    assert "# note: b, e (xl bf16, batch 4" in p.stderr


def test_sweep_of_the_kept_records_at_three_contexts(tmp_path):
    # The fresh-user case: three kept xl records at ctx 512, 2048 and 8192 and a small one of the sweep at 512 had
    # been one bf16 line with a vertical segment at xl.
    v8, sweep = SRC / "results/h200/2026-12-02/v8_memory", SRC / "results/h200/2026-11-30/sweep"
    files = [v8 / "xl_c512_selective.json", v8 / "xl_c2048_selective.json", v8 / "xl_c8192_selective.json",
             sweep / "small_bf16_train_step_w5.json"]
    d, _ = draw(tmp_path, "sweep", files)
    lines = d["axes"][0]["lines"]
    assert all(len(set(ln["x"])) == len(ln["x"]) for ln in lines), lines   # no two points of a line at one size
    assert [ln["label"] for ln in lines] == ["bf16, ctx 512, checkpointing none", "bf16, ctx 512, checkpointing "
                                             "selective", "bf16, ctx 2048, checkpointing selective",
                                             "bf16, ctx 8192, checkpointing selective"]
    assert d["info"] == [] and d["notes"] == []


def test_comm_vs_compute(tmp_path):
    rng = random.Random(3)
    recs = {"one": record(rng), "ddp": record(rng, world_size=2),
            "mpi": record(rng, world_size=2, comm=5.0, exposed=400.0)}   # the host wait exceeds the step: clipped
    d, _ = draw(tmp_path, "comm", [write(tmp_path, k, r) for k, r in recs.items()])
    got = bars_by_label(d["axes"][0])
    ax = d["axes"][0]
    assert ax["yticklabels"] == ["one", "ddp", "mpi"] and ax["yticks"] == sorted(ax["yticks"])[::-1]  # first on top
    for k, r in recs.items():
        t = r["timing"]
        step = t["step"]["mean_ms"]
        comm = t.get("comm", {"mean_ms": 0})["mean_ms"]
        exp = t.get("comm_exposed", {"mean_ms": 0})["mean_ms"]
        want_exp = min(exp, step)
        want_ovl = min(max(comm - exp, 0), step - want_exp)
        assert got[k].get("exposed", 0) == pytest.approx(want_exp)
        assert got[k].get("overlapped", 0) == pytest.approx(want_ovl)
        assert sum(got[k].values()) == pytest.approx(step)
    one_step = recs["one"]["timing"]["step"]["mean_ms"]
    assert got["one"] == pytest.approx({"compute": one_step, "overlapped": 0, "exposed": 0})  # 1 rank: all compute


def test_phases(tmp_path):
    rng = random.Random(4)
    recs = {"train": record(rng), "fwd": record(rng, phase="forward")}
    d, _ = draw(tmp_path, "phases", [write(tmp_path, k, r) for k, r in recs.items()], "--labels", "train,fwd")
    got = bars_by_label(d["axes"][0])
    for k, r in recs.items():
        t = r["timing"]
        parts = {p: t[p]["mean_ms"] or 0 for p in ("forward", "backward", "optimizer")}
        assert got[k].get("forward") == pytest.approx(parts["forward"])
        assert got[k].get("backward", 0) == pytest.approx(parts["backward"])
        assert got[k].get("optimizer", 0) == pytest.approx(parts["optimizer"])
        assert got[k].get("other") == pytest.approx(t["step"]["mean_ms"] - sum(parts.values()))


def test_phases_notes_adamw_inside_the_backward(tmp_path):
    rng = random.Random(6)
    inside, apart = record(rng), record(rng)
    inside["config"]["optimizer"] = {"in_backward": True}
    apart["config"]["optimizer"] = {"in_backward": False}
    _, p = draw(tmp_path, "phases", [write(tmp_path, "inside", inside), write(tmp_path, "apart", apart)])
    notes = [line for line in p.stderr.splitlines() if "inside the backward" in line]
    assert len(notes) == 1 and "inside: AdamW ran inside the backward" in notes[0], p.stderr  # not "apart"


def flat(text):
    """A foot note's text with its wrapping undone."""
    return " ".join(text.split())


def test_phases_in_backward_and_cuda_graph_are_notes_on_the_figure_not_records_left_out(tmp_path):
    # A record whose AdamW ran inside the backward (or whose step was a CUDA graph) is drawn: its note had been
    # printed as "not drawn", the record counted as not drawn, and the note promised by --help was not on the figure.
    rng = random.Random(13)
    inside, graph, apart = record(rng), record(rng), record(rng)
    inside["config"]["optimizer"] = {"in_backward": True}
    graph["cuda_graph"] = {"used": True}
    apart["config"]["optimizer"] = {"in_backward": False}
    paths = [write(tmp_path, k, r) for k, r in (("inside", inside), ("graph", graph), ("apart", apart))]
    d, p = draw(tmp_path, "phases", paths)
    assert d["notes"] == [] and "# not drawn" not in p.stderr, p.stderr
    assert "(phases, 3 of 3 records drawn)" in p.stderr
    assert "# note: inside: AdamW ran inside the backward (optimizer.in_backward)" in p.stderr
    assert "# note: graph: its steps replayed a CUDA graph" in p.stderr
    assert [i.split(":")[0] for i in d["info"]] == ["inside", "graph"]
    foot = [flat(t) for t in d["foot"]]
    assert foot == ["note: inside: AdamW ran inside the backward (optimizer.in_backward): its time is in the backward "
                    "bar", "note: graph: its steps replayed a CUDA graph, which is timed whole: the bar is all 'other'"]
    assert sorted(bars_by_label(d["axes"][0])) == ["apart", "graph", "inside"]
    # without such a record: no foot
    d, _ = draw(tmp_path, "phases", paths[2:])
    assert d["foot"] == [] and d["info"] == []


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_a_trainer_run_with_its_timeline_and_trace_beside_it(tmp_path):
    # A single-rank train_step of the trainer (AdamW inside the backward, its default there) writes its record, a
    # memory timeline and a Chrome trace into one folder; a shell's glob names all three. Every kind that draws the
    # record passes over the other two with a note and draws the record, the phases one with its note on the figure.
    run = tmp_path / "run"
    run.mkdir()
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=1",
                        "--set", "bench.measure_steps=2", "--set", f"profile.memory_timeline={run}/r.memory.json",
                        "--set", f"profile.trace={run}/r.trace.json", "--set", f"output.results={run}/r.json"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((run / "r.json").read_text())
    assert r["status"] == "ok" and r["config"]["optimizer"]["in_backward"] is True
    files = sorted(run.glob("*.json"))
    assert [f.name for f in files] == ["r.json", "r.memory.json", "r.trace.json"]
    for kind in ("phases", "memory", "comm", "sweep", "loss"):
        d, p = draw(tmp_path, kind, files, records=1)
        assert "(%s, 1 of 1 records drawn)" % kind in p.stderr, p.stderr
        assert d["notes"] == [f"{files[1]}: a memory timeline, skipped", f"{files[2]}: a trace, skipped"], d["notes"]
    d, p = draw(tmp_path, "phases", files, records=1)
    assert "# note: r: AdamW ran inside the backward" in p.stderr and "# not drawn: r:" not in p.stderr, p.stderr
    assert [flat(t) for t in d["foot"]] == ["note: r: AdamW ran inside the backward (optimizer.in_backward): its "
                                            "time is in the backward bar"]
    t = r["timing"]
    assert sum(bars_by_label(d["axes"][0])["r"].values()) == pytest.approx(t["step"]["mean_ms"])


def test_memory_by_category_and_planned(tmp_path):
    rng = random.Random(5)
    recs = {"p": record(rng), "q": record(rng), "r": record(rng)}
    del recs["r"]["memory"]["predicted"]   # an older record: no planner prediction, no tick
    d, _ = draw(tmp_path, "memory", [write(tmp_path, k, r) for k, r in recs.items()])
    ax = d["axes"][0]
    got = bars_by_label(ax)
    for k, r in recs.items():
        want = {c: b / GIB for c, b in r["memory"]["by_category"].items() if b > 0}
        assert got[k] == pytest.approx(want)
        assert sum(got[k].values()) == pytest.approx(r["memory"]["peak_bytes"] / GIB)
    (planned,) = ax["lines"]
    y_of = dict(zip(ax["yticklabels"], ax["yticks"]))
    assert list(zip(planned["y"], planned["x"])) == pytest.approx(
        [(y_of[k], recs[k]["memory"]["predicted"]["peak_bytes"] / GIB) for k in ("p", "q")])


def test_memory_in_mib_for_small_runs(tmp_path):
    # every peak and planned peak below 1 GiB: MiB (the bars had read 0.0 GiB), as memory_table.py and plot_memory.py
    rng = random.Random(10)
    recs = {"s": record(rng), "t": record(rng)}
    for r in recs.values():
        cats = {c: rng.randrange(0, 200 * MIB) for c in r["memory"]["by_category"]}
        r["memory"] = {"peak_bytes": sum(cats.values()), "by_category": cats,
                       "predicted": {"peak_bytes": sum(cats.values()) + MIB}}
    d, _ = draw(tmp_path, "memory", [write(tmp_path, k, r) for k, r in recs.items()])
    ax = d["axes"][0]
    assert ax["xlabel"].startswith("MiB")
    got = bars_by_label(ax)
    for k, r in recs.items():
        assert got[k] == pytest.approx({c: b / MIB for c, b in r["memory"]["by_category"].items() if b > 0})
    (planned,) = ax["lines"]
    assert sorted(planned["x"]) == pytest.approx(sorted(r["memory"]["predicted"]["peak_bytes"] / MIB
                                                        for r in recs.values()))
    # one planned peak of 1 GiB or more: GiB for the whole figure
    recs["t"]["memory"]["predicted"]["peak_bytes"] = GIB
    d, _ = draw(tmp_path, "memory", [write(tmp_path, k, r) for k, r in recs.items()])
    assert d["axes"][0]["xlabel"].startswith("GiB")


def no_measured_steps(r):
    """r as the trainer writes it for bench.measure_steps=0: status ok, every timing's mean and samples empty."""
    r["config"]["bench"]["measure_steps"] = 0
    for k in ("forward", "backward", "optimizer", "step"):
        r["timing"][k] = {"mean_ms": None, "std_ms": None, "min_ms": None, "median_ms": None, "max_ms": None,
                          "samples": []}
    r["throughput"] = {"model_tflops_per_gpu": None, "mfu": None, "tokens_per_s": None, "peak_tflops": 756.0}
    return r


@pytest.mark.parametrize("kind", ["phases", "comm", "sweep"])
def test_a_record_without_measured_steps_is_skipped_with_a_note(tmp_path, kind):
    # A finished record of bench.measure_steps=0 has no timings: a note, as a failed run (it had been exit 2 with
    # "a record of an older trainer?").
    rng = random.Random(11)
    paths = [write(tmp_path, "good", record(rng)), write(tmp_path, "m0", no_measured_steps(record(rng)))]
    d, p = draw(tmp_path, kind, paths)
    assert len(d["notes"]) == 1 and "no measured steps (bench.measure_steps 0)" in d["notes"][0], d["notes"]
    assert f"({kind}, 1 of 2 records drawn)" in p.stderr and "older trainer" not in p.stderr
    # only such records: nothing to draw, said as such
    q = run_plot(kind, paths[1], "-o", tmp_path / "bad.png")
    assert q.returncode == 2 and len(q.stderr.splitlines()) == 1, q.stderr
    assert "no measured steps" in q.stderr and "older trainer" not in q.stderr, q.stderr
    # a record without the timing section at all may be an older trainer's: the hint stays
    old = record(rng)
    del old["timing"]
    q = run_plot(kind, write(tmp_path, "old", old), "-o", tmp_path / "bad.png")
    assert q.returncode == 2 and "has no timing" in q.stderr and "older trainer" in q.stderr, q.stderr
    # the memory kind draws it: its memory was measured
    d, _ = draw(tmp_path, "memory", paths)
    assert d["notes"] == []


def test_a_note_shows_the_error_only_when_there_is_one(tmp_path):
    # a running record (error null): "status running", never "(None)"
    rng = random.Random(12)
    running = record(rng, status="running")
    running["error"] = None
    d, p = draw(tmp_path, "phases", [write(tmp_path, "ok", record(rng)), write(tmp_path, "running", running),
                                     write(tmp_path, "oom", record(rng, status="oom"))])
    assert d["notes"][0] == "running: status running: no timings"
    assert d["notes"][1].startswith("oom: status oom (out of memory on cuda:0")
    assert "None" not in p.stderr, p.stderr
    # a run that failed after its steps (its memory timeline not written, say) has timings and memory: not drawn,
    # and the note does not say it has none
    late = record(rng)
    late.update(status="error", error="the memory timeline could not be written")
    for kind, what in (("phases", "timings"), ("memory", "memory")):
        d, _ = draw(tmp_path, kind, [write(tmp_path, "ok", record(rng)), write(tmp_path, "late", late)])
        assert d["notes"] == [f"late: status error (the memory timeline could not be written): a failed run's {what}, "
                              "not drawn"], d["notes"]


def collective_record(rng, nranks, status="ok"):
    """A trainer.result/1 record of job collective_bench: three ops at four sizes (reduce_scatter / all_gather's
    sizes rounded down to a multiple of the ranks' elements, as the bench does)."""
    rows = []
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        for mb in (0.01, 0.1, 1, 10):
            count = int(mb * 2**20) // 4
            if op != "all_reduce":
                count = count // nranks * nranks
            rows.append({"op": op, "size_bytes": count * 4, "count": count, "time_us": rng.uniform(5, 500),
                         "time_us_max": rng.uniform(5, 500), "algbw_gbs": rng.uniform(0.1, 50),
                         "busbw_gbs": rng.uniform(0.1, 50), "wrong": 0})
    r = {"schema": "trainer.result/1", "job": "collective_bench", "status": status, "world_size": nranks,
         "collective_bench": {"comm": "mpi", "nranks": nranks, "dtype": "f32", "results": rows}}
    if status != "ok":
        r["error"] = "rank 1 did not answer"
    return r


def test_collective_bus_bandwidth_by_size(tmp_path):
    rng = random.Random(8)
    recs = {"two": collective_record(rng, 2), "three": collective_record(rng, 3),
            "failed": collective_record(rng, 2, status="error")}
    d, p = draw(tmp_path, "collective", [write(tmp_path, k, r) for k, r in recs.items()])
    ax = d["axes"][0]
    got = {ln["label"]: list(zip(ln["x"], ln["y"])) for ln in ax["lines"]}
    want = {}
    for k in ("two", "three"):
        cb = recs[k]["collective_bench"]
        for op in ("all_gather", "all_reduce", "reduce_scatter"):
            want[f"{k}: {op} ({cb['nranks']} ranks, mpi)"] = sorted(
                (row["size_bytes"], row["busbw_gbs"]) for row in cb["results"] if row["op"] == op)
    assert got.keys() == want.keys()
    for label, pts in want.items():
        assert got[label] == pytest.approx(pts)
    assert d["notes"] and "failed: status error" in d["notes"][0]
    assert "not drawn: failed" in p.stderr
    # a record of another job is refused (one line, exit 2, no PNG)
    out = tmp_path / "x.png"
    q = run_plot("collective", write(tmp_path, "train", record(rng)), "-o", out)
    assert q.returncode == 2 and q.stderr.count("\n") == 1 and "collective_bench" in q.stderr and not out.exists()


def test_kind_option_glob_and_labels(tmp_path):
    rng = random.Random(6)
    for k in ("x1", "x2"):
        write(tmp_path, k, record(rng))
    out = tmp_path / "o.png"
    # a glob's other files (a memory timeline, another job's record) are passed over with a note
    write(tmp_path, "x3_memory", {"schema": "trainer.memory_timeline/1", "events": []})
    write(tmp_path, "x4_collective", collective_record(rng, 2))
    p = run_plot("--kind", "phases", str(tmp_path / "x*.json"), "-o", out, "--dump-json", "-")
    assert p.returncode == 0, p.stderr
    check_png(out, "phases", 2)
    assert json.loads(p.stdout)["axes"][0]["yticklabels"] == ["x1", "x2"]
    assert "x3_memory.json: a memory timeline, skipped" in p.stderr
    assert "x4_collective.json: a record of job 'collective_bench', skipped" in p.stderr
    assert "(phases, 2 of 2 records drawn)" in p.stderr
    # alone, the same file leaves nothing to draw: an error naming why it was passed over
    p = run_plot("phases", tmp_path / "x4_collective.json", "-o", out)
    assert p.returncode == 2 and "job 'collective_bench'" in p.stderr
    # --dump-json onto the -o output
    p = run_plot("phases", tmp_path / "x1.json", "-o", out, "--dump-json", out)
    assert p.returncode == 2 and "is also the -o output" in p.stderr
    # Equal file names in different folders get their folder in the label.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pa, pb = write(tmp_path / "a", "run", record(rng)), write(tmp_path / "b", "run", record(rng))
    p = run_plot("loss", pa, pb, "-o", out, "--dump-json", "-")
    assert p.returncode == 0, p.stderr
    assert [ln["label"] for ln in json.loads(p.stdout)["axes"][0]["lines"]] == ["a/run", "b/run"]
    # the fewest folders that tell them apart (two here), only for the names two files share; the same file twice is
    # one name (it had switched every label to the whole path)
    (tmp_path / "a" / "z").mkdir()
    (tmp_path / "b" / "z").mkdir()
    pz = [write(tmp_path / d / "z", "run", record(rng)) for d in ("a", "b")]
    p = run_plot("phases", *pz, tmp_path / "x1.json", pa, pa, "-o", out, "--dump-json", "-")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["axes"][0]["yticklabels"] == ["a/z/run", "b/z/run", "x1", "a/run", "a/run"]


def test_files_that_are_not_records_are_passed_over_when_named_too(tmp_path):
    # A shell's glob names every file: one PyTorch peer record, memory timeline or trace among them had failed the
    # whole plot (exit 2); they are passed over with a note, as memory_table.py does, an error only when no record is
    # left. A file that is not JSON stays an error.
    rng = random.Random(15)
    good = write(tmp_path, "good", record(rng))
    others = {"peer": (peer_rec("xl", 512, 100.0, 50.0), "a PyTorch peer record (torch_bench.result/1"),
              "good.memory": ({"schema": "trainer.memory_timeline/1", "events": []}, "a memory timeline"),
              "profile.trace": ({"displayTimeUnit": "ms", "traceEvents": []}, "a trace"),
              "bench": (collective_record(rng, 2), "a record of job 'collective_bench'"),
              "list": ([1, 2], "not a trainer result record (a JSON list)"),
              "other": ({"schema": "something/1"}, "not a trainer result record (schema 'something/1')")}
    paths = [write(tmp_path, k, r) for k, (r, _) in others.items()]
    for kind in ("loss", "sweep", "comm", "phases", "memory"):
        d, p = draw(tmp_path, kind, [paths[0], good] + paths[1:], records=1)
        assert f"({kind}, 1 of 1 records drawn)" in p.stderr, p.stderr
        assert len(d["notes"]) == len(paths), d["notes"]
        for n, f, (_, why) in zip(d["notes"], paths, others.values()):
            assert n.startswith(f"{f}: {why}") and n.endswith(", skipped"), n
            assert f"# not drawn: {n}" in p.stderr
    # nothing but such files: one line naming each, exit 2, no PNG
    out = tmp_path / "none.png"
    p = run_plot("memory", *paths, "-o", out)
    assert p.returncode == 2 and not out.exists()
    (line,) = p.stderr.splitlines()
    assert line.startswith("plot.py: error: no trainer result record of job train among the inputs (")
    assert all(f"{f}: {why}" in line for f, (_, why) in zip(paths, others.values()))
    # a file that is not JSON is bad input even beside a record
    (tmp_path / "broken.json").write_text("{")
    p = run_plot("memory", good, tmp_path / "broken.json", "-o", out)
    assert p.returncode == 2 and "is not JSON" in p.stderr and not out.exists()


def test_memory_of_the_kept_v8_folder_with_its_peer_record_and_timelines(tmp_path):
    # --help's example `memory results/h200/2026-12-02/v8_memory/*.json` as the shell expands it: a PyTorch peer
    # record and three memory timelines among the records.
    v8 = SRC / "results/h200/2026-12-02/v8_memory"
    files = sorted(v8.glob("*.json"))
    d, p = draw(tmp_path, "memory", files, records=len(files) - 4)
    skipped = sorted(n.split(": ")[0] for n in d["notes"])
    assert skipped == [str(v8 / "torch_xl_c8192_compiled_ckpt.json")] + sorted(
        str(f) for f in files if f.name.endswith(".memory.json"))
    assert f"(memory, {len(files) - 4} of {len(files) - 4} records drawn)" in p.stderr


def help_examples():
    p = run_plot("--help")
    return [line.strip() for line in p.stdout.splitlines() if line.startswith("    launch/plot.py ")]


def test_help_examples_run(tmp_path):
    # Every example of --help runs as written (from the source folder, a bash shell expanding the unquoted globs),
    # its -o moved into tmp_path: the collective one had named a folder that does not exist, the phases and memory
    # ones had failed on the memory timelines and the peer record their globs match.
    examples = help_examples()
    assert len(examples) == 7 and {e.split()[1] for e in examples} == {"loss", "sweep", "comm", "phases", "memory",
                                                                       "ratio", "collective"}
    for e in examples:
        out = pathlib.Path(e.split(" -o ")[1].split()[0]).name
        cmd = e.replace("launch/plot.py", f"{sys.executable} launch/plot.py", 1).replace("[--mfu]", "--mfu")
        cmd = cmd.replace(f" -o {e.split(' -o ')[1].split()[0]}", f" -o {tmp_path / out}")
        p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, cwd=SRC)
        assert p.returncode == 0, (e, p.stderr)
        data = (tmp_path / out).read_bytes()
        assert data.startswith(b"%PDF" if out.endswith(".pdf") else b"\x89PNG"), e


def test_output_format_follows_the_suffix(tmp_path):
    # -o x.pdf had written PNG bytes into a .pdf; the suffix gives the format, another suffix is refused.
    rng = random.Random(16)
    rec = write(tmp_path, "r", record(rng))
    for name, magic in (("x.pdf", b"%PDF"), ("x.svg", b"<?xml"), ("x.PNG", b"\x89PNG")):
        p = run_plot("phases", rec, "-o", tmp_path / name)
        assert p.returncode == 0, p.stderr
        assert (tmp_path / name).read_bytes().startswith(magic), name
    assert b"<svg" in (tmp_path / "x.svg").read_bytes()
    for name in ("x.jpg", "x"):
        p = run_plot("phases", rec, "-o", tmp_path / name)
        assert p.returncode == 2 and not (tmp_path / name).exists()
        (line,) = p.stderr.splitlines()
        assert line == f"plot.py: error: -o '{tmp_path / name}': plot.py writes .png, .pdf or .svg (the suffix gives " \
                       "the format)"


def interrupted(r, steps_done=7):
    """r as the trainer writes it for a run stopped by SIGINT after `steps_done` of 100 steps."""
    r.update(status="interrupted", error=f"interrupted by SIGINT after step {steps_done} of 100",
             interrupted={"signal": "SIGINT", "steps_done": steps_done, "steps_planned": 100})
    return r


@pytest.mark.parametrize("kind", ["phases", "comm", "sweep", "memory"])
def test_an_interrupted_run_is_drawn_from_the_steps_it_measured(tmp_path, kind):
    # An interrupted run that measured steps had been left out as "no timings" (ddp_table.py and loss_match.py use
    # its numbers); it is drawn, with a note. One interrupted before its first measured step is still left out.
    rng = random.Random(17)
    ok = record(rng, preset="small")
    cut = interrupted(record(rng, preset="xl"))
    early = interrupted(no_measured_steps(record(rng, preset="medium")), steps_done=2)
    paths = [write(tmp_path, "ok", ok), write(tmp_path, "cut", cut), write(tmp_path, "early", early)]
    d, p = draw(tmp_path, kind, paths if kind != "memory" else paths[:2])
    where = "cut (xl bf16)" if kind == "sweep" else "cut"   # sweep: the record, then its size and line
    assert d["info"] == [f"{where}: status interrupted: drawn from the steps it measured (interrupted by SIGINT after "
                         f"step 7 of 100)"]
    assert f"# note: {where}: status interrupted" in p.stderr
    assert [flat(t) for t in d["foot"]][0] == f"note: {where}: status interrupted: drawn from the steps it measured"
    if kind == "memory":
        assert d["notes"] == [] and "(memory, 2 of 2 records drawn)" in p.stderr
        assert sum(bars_by_label(d["axes"][0])["cut"].values()) == pytest.approx(cut["memory"]["peak_bytes"] / GIB)
        return
    assert d["notes"] == ["early (medium bf16): interrupted" if kind == "sweep" else
                          "early: status interrupted (interrupted by SIGINT after step 2 of 100): no timings"]
    assert f"({kind}, 2 of 3 records drawn)" in p.stderr
    if kind == "sweep":
        (line,) = d["axes"][0]["lines"]
        want = sorted((r["model"]["parameters"] / 1e9, r["timing"]["step"]["mean_ms"]) for r in (ok, cut))
        assert list(zip(line["x"], line["y"])) == pytest.approx(want)
    else:
        assert sum(bars_by_label(d["axes"][0])["cut"].values()) == pytest.approx(cut["timing"]["step"]["mean_ms"])


def test_a_run_interrupted_in_its_warm_up_is_drawn_by_memory_from_its_warm_up_steps(tmp_path):
    # Its memory bar had the note "drawn from the steps it measured", but it measured none (timing.step.mean_ms null):
    # its peak is that of its warm-up steps, and the note says so.
    rng = random.Random(18)
    cut = interrupted(record(rng, preset="xl"))
    early = interrupted(no_measured_steps(record(rng, preset="medium")), steps_done=2)
    d, p = draw(tmp_path, "memory", [write(tmp_path, "cut", cut), write(tmp_path, "early", early)])
    assert d["info"] == ["cut: status interrupted: drawn from the steps it measured (interrupted by SIGINT after step 7 "
                         "of 100)", "early: status interrupted: drawn from its warm-up steps (interrupted by SIGINT "
                         "after step 2 of 100)"]
    assert [flat(t) for t in d["foot"]] == ["note: cut: status interrupted: drawn from the steps it measured",
                                            "note: early: status interrupted: drawn from its warm-up steps"]
    assert "# note: early: status interrupted: drawn from its warm-up steps" in p.stderr
    assert d["notes"] == [] and "(memory, 2 of 2 records drawn)" in p.stderr
    assert sum(bars_by_label(d["axes"][0])["early"].values()) == pytest.approx(early["memory"]["peak_bytes"] / GIB)


def test_help():
    p = run_plot("--help")
    assert p.returncode == 0 and all(k in p.stdout for k in ("loss", "sweep", "comm", "phases", "memory", "ratio",
                                                             "collective", "-o"))


def test_bad_input(tmp_path):
    rng = random.Random(7)
    good = write(tmp_path, "good", record(rng))
    no_loss = record(rng)
    del no_loss["loss"]
    no_step = record(rng)
    del no_step["timing"]["step"]
    # hand-edited fields of another type (a fresh user's fuzzing: tracebacks, where the docs promise one line)
    null_cat, int_losses, text_step = record(rng), record(rng), record(rng)
    null_cat["memory"]["by_category"]["activations"] = None
    int_losses["loss"]["per_step"] = -1
    text_step["timing"]["step"]["mean_ms"] = "x"
    cases = {
        "missing": (["loss", tmp_path / "nope.json"], "does not exist"),
        "not json": (["loss", tmp_path / "x.json"], "is not JSON"),
        "a list": (["loss", write(tmp_path, "l", [1, 2])], "not a trainer result record"),
        "timeline": (["memory", write(tmp_path, "t", {"schema": "trainer.memory_timeline/1"})],
                     "no trainer result record of job train among the inputs"),
        "peer record": (["memory", write(tmp_path, "pr", peer_rec("xl", 512, 1.0, 1.0))], "a PyTorch peer record"),
        "other job": (["phases", write(tmp_path, "ab", {"schema": "trainer.result/1", "job": "attention_bench"})],
                      "job 'attention_bench'"),
        "no kind": ([good], "first argument or --kind"),
        "no records": (["loss"], "no result records"),
        "glob": (["loss", str(tmp_path / "zz*.json")], "no file matches"),
        "labels": (["loss", good, "--labels", "a,b"], "2 labels for 1 records"),
        "no loss": (["loss", write(tmp_path, "nl", no_loss)], "no loss.per_step"),
        "no step": (["phases", write(tmp_path, "ns", no_step)], "no timing.step"),
        "all oom": (["comm", write(tmp_path, "oom", record(rng, status="oom"))], "no record with status ok"),
        "directory": (["loss", tmp_path], "is a directory"),
        "no output dir": (["loss", good, "-o", tmp_path / "no" / "x.png"], "does not exist"),
        "output is an input": (["loss", good, "-o", good], "is also the input"),
        "dump is an input": (["loss", good, "--dump-json", good], "is also the input"),
        "output format": (["loss", good, "-o", tmp_path / "bad.png.jpg"], "plot.py writes .png, .pdf or .svg"),
        "null category": (["memory", write(tmp_path, "nc", null_cat)], "a record holds a field the kind cannot read"),
        "int losses": (["loss", write(tmp_path, "il", int_losses)], "a record holds a field the kind cannot read"),
        "text step": (["sweep", write(tmp_path, "ts", text_step)], "a record holds a field the kind cannot read"),
    }
    (tmp_path / "x.json").write_text("{not json")
    for name, (args, msg) in cases.items():
        out = [] if "-o" in args else ["-o", tmp_path / "bad.png"]
        p = run_plot(*args, *out)
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plot.py: error: "), (name, p.stderr)
        assert msg is None or msg in lines[0], (name, lines[0])
        assert not (tmp_path / "bad.png").exists(), name
    assert json.loads(good.read_text())["schema"] == "trainer.result/1"  # the record named as an output is intact


# ---- ratio: the trainer against the PyTorch peer of the same call, by version, from a manifest ----------------------

def trainer_rec(rng, preset, ctx, ms, peak_gib):
    r = record(rng, preset=preset)
    r["config"]["model"]["context_length"] = ctx
    r["config"]["data"] = {"batch_size": 4}
    r["timing"]["step"] = stats(ms)
    r["memory"]["peak_bytes"] = int(peak_gib * GIB)
    return r


def peer_rec(preset, ctx, ms, peak_gib, compile_mode="default", mode="compiled", status="ok"):
    """A launch/torch_bench.py record (torch_bench.result/1); compile_mode None: a record from before --compile-mode."""
    r = {"schema": "torch_bench.result/1", "status": status, "error": None if status == "ok" else "killed",
         "config": {"preset": preset, "mode": mode, "phase": "train_step", "batch": 4, "ctx": ctx,
                    "checkpoint": "none", "compile_mode": compile_mode}}
    if status == "ok":
        r["timing"] = {"step": stats(ms)}
        r["memory"] = {"peak_bytes": int(peak_gib * GIB)}
    return r


def ratio_manifest(tmp_path):
    """Three versions (b has no point), two workloads; the records in tmp_path/rec, the manifest in tmp_path/m with
    root '..'. Returns (manifest path, manifest, {(version, workload): (ratio, trainer GiB, peer GiB)})."""
    rng = random.Random(8)
    rec = tmp_path / "rec"
    rec.mkdir()
    (tmp_path / "m").mkdir()

    def put(name, r):
        write(rec, name, r)
        return f"rec/{name}.json"

    sweep = {"schema": "torch_bench.sweep/1", "rows": [
        peer_rec("xl", 512, 300.0, 70.0, mode="bf16", compile_mode=None),     # eager: not the peer
        peer_rec("xl", 2048, 400.0, 75.0, compile_mode=None),                # another context
        peer_rec("xl", 512, 110.0, 52.0, compile_mode=None)]}                # the one: compile default
    points = [
        {"version": "a", "workload": "small", "trainer": [put("a_s1", trainer_rec(rng, "small", 512, 6.0, 2.5)),
                                                          put("a_s2", trainer_rec(rng, "small", 512, 7.0, 2.5))],
         "peer": [put("a_ps", peer_rec("small", 512, 13.0, 2.6))]},
        {"version": "a", "workload": "xl", "trainer": [put("a_x", trainer_rec(rng, "xl", 512, 99.0, 61.0))],
         "peer": [put("a_sweep", sweep)]},
        {"version": "c", "workload": "small", "trainer": [put("c_s", trainer_rec(rng, "small", 512, 5.0, 2.3))],
         "peer": [put("c_def", peer_rec("small", 512, 8.0, 2.6)),
                  put("c_ro", peer_rec("small", 512, 7.0, 2.7, "reduce-overhead")),
                  put("c_mat", peer_rec("small", 512, 0, 0, "max-autotune-no-cudagraphs", status="timeout"))]},
        {"version": "c", "workload": "xl", "trainer": [put("c_x", trainer_rec(rng, "xl", 512, 95.0, 49.0))],
         "peer": [put("c_xro", peer_rec("xl", 512, 108.0, 52.5, "reduce-overhead"))]},
    ]
    m = {"schema": "plot.peer_ratio/1", "root": "..", "versions": ["a", "b", "c"],
         "workloads": [{"id": "small", "label": "small ctx 512", "preset": "small", "precision": "bf16", "batch": 4,
                        "ctx": 512, "bar": 0.5},
                       {"id": "xl", "label": "xl ctx 512", "preset": "xl", "precision": "bf16", "batch": 4,
                        "ctx": 512, "bar": 0.75}],
         "memory_workload": "xl", "points": points, "skipped": {"b": "no peer kept"}}
    path = tmp_path / "m" / "ratio.json"
    path.write_text(json.dumps(m))
    want = {("a", "small"): (6.5 / 13.0, None, None), ("a", "xl"): (99.0 / 110.0, 61.0, 52.0),
            ("c", "small"): (5.0 / 7.0, None, None), ("c", "xl"): (95.0 / 108.0, 49.0, 52.5)}
    return path, m, want


def check_ratio_png(path, with_memory=True):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1100, 880 if with_memory else 550)


def test_ratio_by_version(tmp_path):
    path, m, want = ratio_manifest(tmp_path)
    out, dump = tmp_path / "ratio.png", tmp_path / "ratio.dump.json"
    # run from another directory: the record paths start at the manifest's root, not the current directory
    p = run_plot("ratio", path, "-o", out, "--dump-json", dump, cwd=tmp_path / "rec")
    assert p.returncode == 0, p.stderr
    check_ratio_png(out)
    d = json.loads(dump.read_text())
    assert d["versions"] == ["a", "b", "c"]
    ratio_ax, mem_ax = d["axes"]
    lines = {ln["label"]: ln for ln in ratio_ax["lines"]}
    for wid, label in (("small", "small ctx 512"), ("xl", "xl ctx 512")):
        assert lines[label]["x"] == [0, 2]   # versions a and c; b has no point
        assert lines[label]["y"] == pytest.approx([want[("a", wid)][0], want[("c", wid)][0]])
    assert lines["bar small ctx 512: 0.5x"]["y"] == pytest.approx([0.5, 0.5])
    assert lines["bar xl ctx 512: 0.75x"]["y"] == pytest.approx([0.75, 0.75])
    mem = {ln["label"].split(" ")[0]: ln for ln in mem_ax["lines"]}
    assert mem["trainer"]["x"] == [0, 2] and mem["PyTorch"]["x"] == [0, 2]
    assert mem["trainer"]["y"] == pytest.approx([want[("a", "xl")][1], want[("c", "xl")][1]], abs=1e-6)
    assert mem["PyTorch"]["y"] == pytest.approx([want[("a", "xl")][2], want[("c", "xl")][2]], abs=1e-6)
    pts = {(r["version"], r["workload"]): r for r in d["points"]}
    assert pts[("a", "small")]["trainer_each_ms"] == [6.0, 7.0]          # two records of one call: averaged
    assert pts[("a", "xl")]["peer_file"].endswith("a_sweep.json rows[2]")  # the sweep's matching row
    assert pts[("a", "xl")]["peer_compile_mode"] == "default"              # no compile_mode: torch.compile's default
    assert pts[("c", "small")]["peer_compile_mode"] == "reduce-overhead"   # the fastest of the call's modes
    assert any("c_mat" in n and "timeout" in n for n in d["notes"])
    assert any(n.startswith("b: no point") for n in d["notes"])
    assert "= 0.714" in p.stderr and "c_ro.json" in p.stderr                # every point printed with its files
    # without memory_workload: one panel
    del m["memory_workload"]
    path.write_text(json.dumps(m))
    p = run_plot("ratio", path, "-o", out)
    assert p.returncode == 0, p.stderr
    check_ratio_png(out, with_memory=False)


def test_ratio_bad_input(tmp_path):
    path, m, _ = ratio_manifest(tmp_path)
    rng = random.Random(9)

    def variant(name, change):
        v = json.loads(json.dumps(m))
        change(v)
        f = tmp_path / "m" / f"{name}.json"
        f.write_text(json.dumps(v))
        return f

    write(tmp_path / "rec", "x2048", trainer_rec(rng, "xl", 2048, 320.0, 63.0))
    write(tmp_path / "rec", "p2048", peer_rec("xl", 2048, 340.0, 73.0))
    no_time = peer_rec("xl", 512, 1, 1)
    del no_time["timing"]
    write(tmp_path / "rec", "no_time", no_time)
    write(tmp_path / "rec", "oom", peer_rec("xl", 512, 0, 0, status="oom"))

    def point(i, **kw):
        return lambda v: v["points"][i].update(kw)

    cases = {
        "missing manifest": ([tmp_path / "nope.json"], "does not exist"),
        "not a manifest": ([tmp_path / "rec" / "a_s1.json"], "is not a ratio manifest"),
        "two manifests": ([path, path], "takes one manifest"),
        "labels": ([path, "--labels", "a"], "--labels is for the record kinds"),
        "no manifest": ([], "no ratio manifest given"),
        "unknown key": ([variant("k", point(0, peers=[]))], "unknown key 'peers'"),
        "no trainer key": ([variant("t", lambda v: v["points"][0].pop("trainer"))], "has no 'trainer'"),
        "unknown version": ([variant("v", point(0, version="zz"))], "'zz' is not one of the versions"),
        "unknown workload": ([variant("w", point(0, workload="medium"))], "'medium' is not one of the workloads"),
        "twice": ([variant("2", lambda v: v["points"].append(dict(v["points"][0])))], "is listed twice"),
        "skipped with points": ([variant("s", lambda v: v["skipped"].update(a="x"))], "also listed as skipped"),
        "missing record": ([variant("mr", point(0, trainer=["rec/gone.json"]))], "does not exist"),
        "trainer of another ctx": ([variant("tc", point(1, trainer=["rec/x2048.json"]))],
                                   "not the workload xl (xl bf16 batch 4 ctx 512"),
        "peer of another ctx": ([variant("pc", point(1, peer=["rec/p2048.json"]))],
                                "not the workload xl (xl compiled train_step batch 4 ctx 512"),
        "peer is a trainer record": ([variant("pt", point(1, peer=["rec/a_x.json"]))], "not a PyTorch peer record"),
        "peer without timing": ([variant("pn", point(1, peer=["rec/no_time.json"]))], "has no timing.step.mean_ms"),
        "no ok peer": ([variant("po", point(1, peer=["rec/oom.json"]))], "no peer record with status ok"),
        "bad memory workload": ([variant("mw", lambda v: v.update(memory_workload="xxl"))],
                                "memory_workload 'xxl' is not one of the workloads"),
        "output is a record": ([path, "-o", tmp_path / "rec" / "a_s1.json"], "is also the input"),
    }
    for name, (args, msg) in cases.items():
        out = [] if "-o" in args else ["-o", tmp_path / "bad.png"]
        p = run_plot("ratio", *args, *out)
        assert p.returncode == 2, (name, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("plot.py: error: "), (name, p.stderr)
        assert msg in lines[0], (name, lines[0])
        assert not (tmp_path / "bad.png").exists(), name
    assert json.loads((tmp_path / "rec" / "a_s1.json").read_text())["schema"] == "trainer.result/1"
