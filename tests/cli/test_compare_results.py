"""launch/compare_results.py: trainer records beside the PyTorch peer's (torch_bench.result/1), on the kept H200
records of v24 (the ratios are computed here from the files, independently of the script), a time of one sample
without "± std", columns of the same file name named with as many parent folders as make the names unique (the same
file twice keeps its name), and bad input (a value of another type in a hand-edited record too: one line naming the file and the
key)."""
import json
import os
import pathlib
import statistics
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
SCRIPT = SRC / "launch" / "compare_results.py"
V24 = SRC / "results" / "h200" / "2026-12-04" / "v24" / "call2"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def row(text, label):
    """The cells of the row `label` of the text table (split on runs of two or more spaces)."""
    import re
    for line in text.splitlines():
        if line.startswith(label + "  ") or line == label:
            return re.split(r"\s{2,}", line.strip())[1:]
    raise AssertionError(f"no row '{label}' in:\n{text}")


def test_peer_beside_trainer():
    peer, ours = V24 / "torch_xl_ro.json", V24 / "xl1.json"
    p, t = json.loads(peer.read_text()), json.loads(ours.read_text())
    out = run(peer, ours)
    assert out.returncode == 0, out.stderr
    ratio = t["timing"]["step"]["mean_ms"] / p["timing"]["step"]["mean_ms"]
    assert row(out.stdout, "step time vs first") == ["1.00x", f"{ratio:.2f}x"]
    assert row(out.stdout, "job / name") == [
        "peer / torch_bench compiled train_step, torch.compile reduce-overhead", "train / xl1"]
    ps = p["timing"]["step"]  # the std as the trainer's: n - 1
    assert row(out.stdout, "step ms (mean ± std)")[0] == (
        f"{ps['mean_ms']:.2f} ± {statistics.stdev(ps['times_ms']):.2f} (n={ps['samples']})")
    assert row(out.stdout, "cuda graph")[0] == "yes (torch.compile reduce-overhead)"
    assert row(out.stdout, "peak memory") == [f"{p['memory']['peak_bytes'] / 2**30:.2f} GiB",
                                              f"{t['memory']['peak_bytes'] / 2**30:.2f} GiB"]
    assert row(out.stdout, "precision") == ["bf16 (autocast, compiled)", "bf16"]
    model = row(out.stdout, "model")
    assert model[0] == model[1] and model[0].startswith("xl: d_model 2560 d_ff 10240 L 32")  # the same shape
    md = run("--markdown", ours, peer)
    assert md.returncode == 0, md.stderr
    assert f"| step time vs first | 1.00x | {1 / ratio:.2f}x |" in md.stdout


def test_bad_input(tmp_path):
    """One line on stderr, exit 2 (as memory_table.py and plot.py), nothing on stdout."""
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/1"}))
    out = run(V24 / "xl1.json", other)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.splitlines() == [f"compare_results: error: '{other}' is not a trainer result record (schema "
                                       "trainer.result/1) nor a PyTorch peer's (torch_bench.result/1)"]
    missing = run(tmp_path / "missing.json")
    assert (missing.returncode, missing.stdout) == (2, "") and len(missing.stderr.splitlines()) == 1
    assert missing.stderr.startswith(f"compare_results: error: cannot read '{tmp_path / 'missing.json'}': ")
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    out = run(listed)
    assert (out.returncode, out.stdout) == (2, "") and len(out.stderr.splitlines()) == 1


def test_null_sections_running_records_and_long_errors(tmp_path):
    """A record with status null (hand-edited) shows "-" there; a running record (error null) just "running"; a long
    error is cut at a word boundary with "…"; null world_size / job show "-"."""
    base = {"schema": "trainer.result/1", "job": "train", "name": "r", "world_size": 1,
            "config": {"precision": "fp32", "parallel": {"strategy": "none", "comm": "none"}}}
    recs = {"nostatus": {**base, "status": None, "world_size": None, "job": None},
            "running": {**base, "status": "running", "error": None, "pid": 12},
            "oom": {**base, "status": "oom", "error": "out of memory on cuda:0: asked for 47.81 GiB (optimizer) "
                                                      "with 12.50 GiB free of 139.80 GiB"},
            "word": {**base, "status": "error", "error": "x" * 80}}
    files = []
    for name, rec in recs.items():
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(rec))
    out = run(*files)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert "None" not in out.stdout, out.stdout
    assert row(out.stdout, "status") == ["-", "running", "oom (out of memory on cuda:0: asked for 47.81 GiB "
                                         "(optimizer)…)", "error (" + "x" * 60 + "…)"]
    assert row(out.stdout, "world size") == ["-", "1", "1", "1"]
    assert row(out.stdout, "job / name")[0] == "- / r"
    peer = tmp_path / "peer.json"
    peer.write_text(json.dumps({**peer_record(), "status": None}))
    out = run(peer)
    assert out.returncode == 0 and row(out.stdout, "status") == ["-"], (out.stdout, out.stderr)


def peer_record(phase="train_step", status="ok", times=(10.0, 12.0, 14.0), **config):
    c = {"preset": "small", "mode": "compiled", "phase": phase, "device": "cuda", "batch": 4, "ctx": 512,
         "vocab": 10000, "d_model": 768, "d_ff": 3072, "num_layers": 12, "num_heads": 12, "attention": "sdpa",
         "checkpoint": "none", "compile_mode": "default"}
    c.update(config)
    r = {"schema": "torch_bench.result/1", "status": status, "error": None if status == "ok" else "out of memory",
         "config": c, "model": {"params": 128625408}}
    if status == "ok":
        r["timing"] = {"step": {"mean_ms": statistics.fmean(times), "std_ms": statistics.pstdev(times),
                                "samples": len(times), "times_ms": list(times)}}
        r["memory"] = {"peak_bytes": 3 * 2**30}
    return r


def test_peer_phases_and_failed_records(tmp_path):
    """A forward-only peer record is not a step (its own row; no step ratio against it); an oom record and a
    placeholder without dims (a timed-out configuration) print '-' where they have nothing."""
    files = {}
    for name, rec in {"fwd": peer_record(phase="forward"), "step": peer_record(times=(20.0, 22.0)),
                      "oom": peer_record(status="oom"),
                      "timeout": {"schema": "torch_bench.result/1", "status": "timeout", "error": "took > 600 s",
                                  "config": {"preset": "xl", "mode": "compiled", "phase": "train_step",
                                             "batch": 4, "ctx": 512, "vocab": 10000, "checkpoint": "block",
                                             "compile_mode": "max-autotune-no-cudagraphs"},
                                  "model": {"params": 3406809600}}}.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(rec))
    out = run(files["step"], files["fwd"], files["oom"], files["timeout"])
    assert out.returncode == 0, out.stderr
    assert row(out.stdout, "job / name")[:2] == ["peer / torch_bench compiled train_step, torch.compile default",
                                                 "peer / torch_bench compiled forward, torch.compile default"]
    assert row(out.stdout, "step ms (mean ± std)") == [f"21.00 ± {statistics.stdev([20.0, 22.0]):.2f} (n=2)",
                                                       "-", "-", "-"]
    fwd = f"12.00 ± {statistics.stdev([10.0, 12.0, 14.0]):.2f} (n=3)"
    assert row(out.stdout, "forward ms (mean ± std)") == ["-", fwd, "-", "-"]
    assert row(out.stdout, "step time vs first") == ["1.00x", "-", "-", "-"]
    assert row(out.stdout, "status") == ["ok", "ok", "oom (out of memory)", "timeout (took > 600 s)"]
    model = row(out.stdout, "model")
    assert model[0].startswith("small: d_model 768") and model[3] == "xl"
    assert row(out.stdout, "checkpointing")[3] == "block (every block: the trainer's full)"
    assert row(out.stdout, "cuda graph") == ["no"] * 4


def trainer_record(**extra):
    return {"schema": "trainer.result/1", "job": "train", "name": "r", "status": "ok", "world_size": 1,
            "config": {"precision": "fp32", "parallel": {"strategy": "none", "comm": "none"}},
            "timing": {"step": {"mean_ms": 5.0, "std_ms": 0.0, "samples": [5.0]},
                       "forward": {"mean_ms": 2.0, "std_ms": 0.5, "samples": [1.5, 2.5]}},
            "memory": {"peak_bytes": 2**20, "by_category": {"parameters": 2**19}}, **extra}


def test_one_sample_has_no_std(tmp_path):
    one = tmp_path / "one.json"
    one.write_text(json.dumps(trainer_record()))
    out = run(one)
    assert out.returncode == 0, out.stderr
    assert row(out.stdout, "step ms (mean ± std)") == ["5.00 (n=1)"]
    assert row(out.stdout, "forward ms (mean ± std)") == ["2.00 ± 0.50 (n=2)"]


def test_gemm_autotune_row_says_why_it_is_off(tmp_path):
    """The 'gemm autotune' row: off by gemm_autotune false, off by deterministic true (gemm_autotune null resolves to
    false there), and a cpu record's '- (cpu)', with deterministic too."""
    files = []
    for name, cfg, section in (
            ("plain", {"device": "cuda", "gemm_autotune": False, "deterministic": False}, {"enabled": False}),
            ("det", {"device": "cuda", "gemm_autotune": False, "deterministic": True}, {"enabled": False}),
            ("cpu", {"device": "cpu", "gemm_autotune": True, "deterministic": False}, {"enabled": False}),
            ("cpu_det", {"device": "cpu", "gemm_autotune": False, "deterministic": True}, {"enabled": False})):
        r = trainer_record(gemm_autotune=section)
        r["config"].update(cfg)
        files.append(tmp_path / (name + ".json"))
        files[-1].write_text(json.dumps(r))
    out = run(*files)
    assert out.returncode == 0, out.stderr
    assert row(out.stdout, "gemm autotune") == ["off", "off (deterministic)", "- (cpu)", "- (cpu)"]


def test_records_of_the_same_file_name_are_named_by_their_folders(tmp_path):
    """Two run.json: each column named with the fewest parent folders that tell them apart (they had the paths as
    given), a file name no other record has alone; the same file twice keeps its name."""
    files = []
    for d, step in (("r1/x", 5.0), ("r2/x", 6.0)):
        (tmp_path / d).mkdir(parents=True)
        files.append(tmp_path / d / "run.json")
        files[-1].write_text(json.dumps(trainer_record(timing={"step": {"mean_ms": step, "std_ms": 0.0,
                                                                         "samples": [step]}})))
    other = tmp_path / "other.json"
    other.write_text(json.dumps(trainer_record()))
    out = run(*files, other)
    assert out.returncode == 0, out.stderr
    assert row(out.stdout, "field") == ["r1/x/run.json", "r2/x/run.json", "other.json"]
    assert row(out.stdout, "step ms (mean ± std)") == ["5.00 (n=1)", "6.00 (n=1)", "5.00 (n=1)"]
    out = run(files[0], tmp_path / "r1/x/../x/run.json", "--markdown")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "| field | run.json | run.json |"


@pytest.mark.parametrize("change, message", [
    ({"timing": {"step": "fast"}}, 'timing.step is "fast", not an object'),
    ({"timing": {"step": {"mean_ms": "5"}}}, 'timing.step.mean_ms is "5", not a number'),
    ({"memory": {"peak_bytes": "big"}}, 'memory.peak_bytes is "big", not a number'),
    ({"memory": {"by_category": {"head": None, "parameters": "1 MiB"}}},
     'memory.by_category.parameters is "1 MiB", not a number'),
    ({"throughput": {"tokens_per_s": True}}, "throughput.tokens_per_s is true, not a number"),
    ({"loss": {"final": [5.0]}}, "loss.final is [5.0], not a number"),
    ({"config": {"model": "tiny"}}, 'config.model is "tiny", not an object'),
    # a key check() does not type (a fresh user's fuzzing: a traceback), named by the generic fallback
    ({"config": {"attention": 5}}, "a field of another type than a result record's (TypeError: "),
])
def test_a_value_of_another_type_is_one_line_naming_the_file_and_key(tmp_path, change, message):
    ok, bad = tmp_path / "ok.json", tmp_path / "bad.json"
    ok.write_text(json.dumps(trainer_record()))
    bad.write_text(json.dumps(trainer_record(**change)))
    out = run(ok, bad)
    assert (out.returncode, out.stdout) == (2, ""), (out.stdout, out.stderr)
    lines = out.stderr.splitlines()
    if "TypeError" in message:
        assert len(lines) == 1 and lines[0].startswith(f"compare_results: error: '{bad}': {message}"), lines
        return
    assert lines == [f"compare_results: error: '{bad}': {message} (a hand-edited record?)"]
    peer = tmp_path / "peer.json"  # a peer's too
    peer.write_text(json.dumps({**peer_record(), "timing": {"step": {"mean_ms": 5.0, "times_ms": [5.0, "6"]}}}))
    out = run(peer)
    assert (out.returncode, out.stdout) == (2, ""), (out.stdout, out.stderr)
    assert out.stderr.splitlines() == [f"compare_results: error: '{peer}': timing.step.times_ms.1 is \"6\", not a "
                                       "number (a hand-edited record?)"]


def test_a_small_ratio_keeps_two_significant_digits():
    """A tiny run beside xl: "0.0012x", not "0.00x" (a fresh user's finding)."""
    sys.path.insert(0, str(SRC / "launch"))
    import compare_results
    assert [compare_results.ratio(x, 1000.0) for x in (1.2, 870.0, 95.0, 0.0, None)] == \
        ["0.0012x", "0.87x", "0.10x", "0.00x", "-"]
