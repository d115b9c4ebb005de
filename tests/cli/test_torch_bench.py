"""launch/torch_bench.py: activation checkpointing (--checkpoint block), --compile-mode best, --help without PyTorch.

--help must work under a python3 that has no torch (it is the first thing a user runs on a new machine); a run
without torch is one error line. With torch: a checkpointed tiny CPU run records config.checkpoint, and the
checkpointed model (torch_bench.checkpoint_blocks) gives the same loss and gradients as the plain one in float64.
--compile-mode best without compiling: best_of_compile_modes with fake runners (the chosen mode and compile_modes
against a reference loop), its refusals (one error line, exit 2), and on the CPU the three subprocesses end to end
(torch_bench refuses compiled modes off CUDA, so each writes an error record, or times out with --timeout 0.01).
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BENCH = SRC / "launch" / "torch_bench.py"
# Runs the script as __main__ with torch made unimportable (a None entry in sys.modules raises ImportError).
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [{path!r}] + sys.argv[1:]; "
            "runpy.run_path({path!r}, run_name='__main__')")


def run_without_torch(*args):
    return subprocess.run([sys.executable, "-c", NO_TORCH.format(path=str(BENCH)), *args], capture_output=True,
                          text=True, timeout=60)


def test_help_without_torch():
    p = run_without_torch("--help")
    assert p.returncode == 0, p.stderr
    assert "--checkpoint {none,block}" in p.stdout and "torch.utils.checkpoint" in p.stdout


def test_a_run_without_torch_is_one_error_line():
    p = run_without_torch("--preset", "tiny")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("torch_bench.py: error: PyTorch is not available")


def test_checkpointed_run_is_recorded(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "r.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    p = subprocess.run([sys.executable, str(BENCH), "--preset", "tiny", "--device", "cpu", "--warmup", "1",
                        "--steps", "2", "--checkpoint", "block", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["status"] == "ok" and r["config"]["checkpoint"] == "block"
    assert "checkpoint block" in p.stdout


def test_checkpointed_blocks_give_the_same_loss_and_gradients():
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(SRC / "launch"))
    import torch_bench as tb
    import reference_model as ref
    cfg = tb.preset_config("tiny", None, 32)
    x, y = tb.make_batch(cfg, 2, 5, "cpu")
    grads, losses = [], []
    for checkpoint in (False, True):
        torch.manual_seed(0)
        model = ref.TransformerLM(cfg, dtype=torch.float64)
        if checkpoint:
            tb.checkpoint_blocks(model)
            assert all(isinstance(b, tb.CheckpointedBlock) for b in model.layers)
        loss = tb.LossModule(model)(x, y)
        loss.backward()
        losses.append(loss.item())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert losses[0] == losses[1]
    assert len(grads[0]) == len(grads[1])
    for a, b in zip(*grads):
        assert torch.equal(a, b)   # recompute runs the same ops on the same inputs: bitwise equal


# ---- --compile-mode best ----------------------------------------------------------------------------------------
def torch_bench_module():
    sys.path.insert(0, str(SRC / "launch"))
    import torch_bench as tb   # imports without torch too (torch is imported in a try)
    return tb


def fake_record(compile_mode, status, mean_ms=None, peak_bytes=None):
    """A record as run_one / run_child write it, reduced to what best_of_compile_modes reads."""
    r = {"schema": "torch_bench.result/1", "status": status, "error": None if status == "ok" else f"{status} here",
         "config": {"mode": "compiled", "compile_mode": compile_mode}, "wall_s": 1.5}
    if status == "ok":
        r["timing"] = {"step": {"mean_ms": mean_ms, "times_ms": [mean_ms]}}
    if peak_bytes is not None:
        r["memory"] = {"peak_bytes": peak_bytes}
    return r


SCENARIOS = {   # compile mode -> (status, mean ms, peak bytes), in BEST_COMPILE_MODES order
    "reduce_overhead_fastest": [("ok", 9.10, 5 << 30), ("ok", 7.84, 6 << 30), ("ok", 8.20, 5 << 30)],
    "fastest_after_an_oom": [("oom", None, 139 << 30), ("error", None, None), ("ok", 12.5, 90 << 30)],
    "tie_keeps_the_earlier": [("ok", 8.0, 1), ("timeout", None, None), ("ok", 8.0, 2)],
    "none_ok_first_failure": [("timeout", None, None), ("oom", None, 7), ("error", None, None)],
    "none_ok_oom_first": [("oom", None, 7), ("error", None, None), ("timeout", None, None)],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_best_of_compile_modes_keeps_the_fastest(name):
    tb = torch_bench_module()
    modes = tb.BEST_COMPILE_MODES
    specs = dict(zip(modes, SCENARIOS[name]))
    records = {m: fake_record(m, *specs[m]) for m in modes}
    calls, reports = [], []

    def runner(m):
        calls.append(m)
        return records[m]

    best = tb.best_of_compile_modes(runner, lambda m, r: reports.append((m, r["status"])))
    assert calls == modes   # each mode once, in order
    assert reports == [(m, specs[m][0]) for m in modes]
    # Reference: the smallest mean among the ok modes, the first mode on a tie; none ok: the first mode's record.
    ok = [m for m in modes if specs[m][0] == "ok"]
    chosen = None
    for m in ok:
        if chosen is None or specs[m][1] < specs[chosen][1]:
            chosen = m
    assert best["compile_mode_chosen"] == chosen
    source = records[chosen if chosen is not None else modes[0]]
    assert best["status"] == source["status"] and best["config"] == source["config"]
    assert best.get("timing") == source.get("timing") and best["error"] == source["error"]
    assert best["compile_modes"] == [
        {"mode": m, "status": specs[m][0], "mean_ms": specs[m][1], "peak_bytes": specs[m][2], "wall_s": 1.5,
         "error": None if specs[m][0] == "ok" else f"{specs[m][0]} here"} for m in modes]
    assert all("compile_modes" not in r for r in records.values())   # a copy: the runners' records are unchanged


def test_best_compile_modes_are_the_guides_three():
    tb = torch_bench_module()
    assert tb.BEST_COMPILE_MODES == ["default", "reduce-overhead", "max-autotune-no-cudagraphs"]
    assert set(tb.BEST_COMPILE_MODES) <= set(tb.COMPILE_MODES)


def test_best_line_names_the_fastest():
    tb = torch_bench_module()
    modes = tb.BEST_COMPILE_MODES
    specs = dict(zip(modes, SCENARIOS["fastest_after_an_oom"]))
    best = tb.best_of_compile_modes(lambda m: fake_record(m, *specs[m]))
    assert tb.best_line(best) == ("# fastest compile mode: max-autotune-no-cudagraphs "
                                  "(default oom, reduce-overhead error, max-autotune-no-cudagraphs 12.50 ms)")
    specs = dict(zip(modes, SCENARIOS["none_ok_first_failure"]))
    none = tb.best_of_compile_modes(lambda m: fake_record(m, *specs[m]))
    assert tb.best_line(none).startswith("# no compile mode ran (default timeout, reduce-overhead oom")


@pytest.mark.parametrize("argv,env,says", [
    (["--mode", "fp32", "--compile-mode", "best"], {}, "needs --mode compiled or compiled_pure (not fp32)"),
    (["--mode", "bf16", "--compile-mode", "best", "--preset", "tiny"], {}, "(not bf16)"),
    (["--mode", "compiled", "--compile-mode", "best"], {"WORLD_SIZE": "2"}, "not torchrun"),
    (["--sweep", "--modes", "fp32", "bf16", "--compile-mode", "best"], {}, "needs a compiled mode among --modes"),
])
def test_best_is_refused_with_one_line(argv, env, says):
    if "--sweep" in argv:
        pytest.importorskip("torch")   # the sweep's modes are checked after the device is known
    p = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, **env))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    errors = [line for line in lines if "error" in line]
    assert errors == [lines[-1]] and lines[-1].startswith("torch_bench.py: error: --"), p.stderr
    assert says in lines[-1] and "Traceback" not in p.stderr and p.stdout == ""


def run_best_on_cpu(tmp_path, *extra):
    """--mode compiled --compile-mode best on the CPU: torch_bench refuses compiled modes off CUDA, so each of the
    three subprocesses writes an error record (or times out) without compiling anything."""
    pytest.importorskip("torch")
    out = tmp_path / "best.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        env.pop(key, None)
    p = subprocess.run([sys.executable, str(BENCH), "--preset", "tiny", "--device", "cpu", "--mode", "compiled",
                        "--compile-mode", "best", "--warmup", "1", "--steps", "1", "--json", str(out), *extra],
                       capture_output=True, text=True, timeout=300, env=env)
    return p, json.loads(out.read_text())


def test_best_runs_each_mode_in_a_subprocess(tmp_path):
    p, r = run_best_on_cpu(tmp_path)
    assert p.returncode == 1, p.stderr[-3000:]   # every mode failed: exit 1 as for an error
    modes = ["default", "reduce-overhead", "max-autotune-no-cudagraphs"]
    assert r["schema"] == "torch_bench.result/1" and r["status"] == "error" and r["compile_mode_chosen"] is None
    assert r["config"]["compile_mode"] == "default" and "needs CUDA" in r["error"]   # the first mode's record
    assert [t["mode"] for t in r["compile_modes"]] == modes
    assert all(t["status"] == "error" and "needs CUDA" in t["error"] for t in r["compile_modes"])
    rows = [line for line in p.stdout.splitlines() if not line.startswith("#")]
    assert [row.split("compile ")[1].split(":")[0] for row in rows] == modes   # one row per mode, in order
    assert p.stdout.splitlines()[-1].startswith("# no compile mode ran (default error")


def test_best_times_out_each_mode(tmp_path):
    p, r = run_best_on_cpu(tmp_path, "--timeout", "0.01")   # a child cannot even import torch in 10 ms
    assert p.returncode == 1, p.stderr[-3000:]
    assert r["status"] == "timeout" and r["error"] == "timeout after 0.01 s" and r["compile_mode_chosen"] is None
    assert [(t["mode"], t["status"]) for t in r["compile_modes"]] == [
        ("default", "timeout"), ("reduce-overhead", "timeout"), ("max-autotune-no-cudagraphs", "timeout")]
