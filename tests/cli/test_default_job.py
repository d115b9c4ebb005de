"""The README's main job: `trainer configs/default.json` trains on the fortunes text and writes a result record.

Runs the real default (200 steps on the CPU; about a minute on 2 cores) and checks that the loss falls from about
ln(256) = 5.5 nats/byte to below 2.5, and that the record lands under results/. Time is reported, not asserted.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_default_job_learns_fortunes(tmp_path):
    if not pathlib.Path("/usr/share/games/fortunes").is_dir():
        pytest.skip("the Debian package 'fortunes' is not installed")
    data = tmp_path / "fortunes.u16"
    subprocess.run([sys.executable, str(SRC / "launch/text_to_tokens.py"), str(data), "/usr/share/games/fortunes"],
                   check=True, capture_output=True)
    record = SRC / "results/runs/test_default_job.json"
    record.unlink(missing_ok=True)
    t0 = time.time()
    p = subprocess.run([BIN, str(SRC / "configs/default.json"), "--set", "device=cpu", "--set", f"data.path={data}",
                        "--set", f"output.results={record.relative_to(SRC)}"],
                       cwd=SRC, capture_output=True, text=True, timeout=1500)
    wall = time.time() - t0
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(record.read_text())
    losses = r["loss"]["per_step"]
    print(f"default job: {len(losses)} steps in {wall:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert r["status"] == "ok"
    assert losses[0] > 5.0                      # starts near ln(256) = 5.55
    assert min(losses[-10:]) < 2.5              # learned byte statistics of English text
    assert r["timing"]["step"]["samples"] and r["memory"]["peak_bytes"] > 0
    record.unlink()


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_record_names_what_differs_from_the_preset(tmp_path):
    """A preset run with one dimension changed says so in the record and the start line (and a plain one does not)."""
    base = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=0",
            "--set", "bench.measure_steps=1"]
    p = subprocess.run(base + ["--set", "model.context_length=32", "--set", f"output.results={tmp_path / 'a.json'}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads((tmp_path / "a.json").read_text())
    assert r["model"]["preset"] == "tiny"
    assert r["model"]["changed_from_preset"] == {"context_length": {"preset": 64, "used": 32}}
    assert "preset tiny, context_length 32 instead of 64" in p.stderr + p.stdout
    p = subprocess.run(base + ["--set", f"output.results={tmp_path / 'b.json'}"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads((tmp_path / "b.json").read_text())["model"]["changed_from_preset"] == {}


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_diverged_run_keeps_its_loss_curve(tmp_path):
    """A run whose loss becomes non-finite exits 1 with a record of status error that names the step (counted from 1,
    as in the log) and keeps the per-step losses up to the failing one (the non-finite value as null)."""
    out = tmp_path / "diverged.json"
    p = subprocess.run([BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "optimizer.lr=1e30",
                        "--set", "bench.warmup_steps=0", "--set", "bench.measure_steps=10", "--set", "bench.log_every=1",
                        "--set", f"output.results={out}"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    r = json.loads(out.read_text())
    assert r["status"] == "error" and r["error"].startswith("loss is ")
    losses = r["loss"]["per_step"]
    step = int(r["error"].rsplit(" ", 1)[1])
    assert len(losses) == step and losses[-1] is None and r["loss"]["final"] is None
    assert all(isinstance(x, float) for x in losses[:-1]) and losses[0] > 5.0  # finite before, near ln(vocab)
    assert f"step {step - 1:4d}/10" in p.stdout + p.stderr or step == 1  # the log's last line is the step before


@pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
def test_max_grad_norm_without_an_optimizer_step_is_named_as_ignored(tmp_path):
    """bench.phase forward / forward_backward take no optimizer step: a max_grad_norm asked for (its default is null)
    clips nothing, and the log says so (rank 0 once); a train_step run (which clips) and a run without the key say
    nothing."""
    base = [BIN, str(SRC / "configs/tiny.json"), "--set", "device=cpu", "--set", "bench.warmup_steps=0",
            "--set", "bench.measure_steps=1"]
    for phase, norm, warned in [("forward", "0.5", True), ("forward_backward", "0.5", True),
                                ("train_step", "0.5", False), ("forward", "null", False)]:
        p = subprocess.run(base + ["--set", f"bench.phase={phase}", "--set", f"optimizer.max_grad_norm={norm}",
                                   "--set", f"output.results={tmp_path / (phase + norm + '.json')}"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr[-2000:]
        out = p.stderr + p.stdout
        line = f"optimizer.max_grad_norm 0.5 is ignored: bench.phase '{phase}' takes no optimizer step"
        assert (line in out) == warned, (phase, norm, out[-2000:])
        assert warned or "is ignored" not in out, (phase, norm, out[-2000:])


def test_text_to_tokens_bad_input_is_one_line_and_exit_2(tmp_path):
    """A missing input, or inputs with no text (a binary file is skipped, and named), is bad input as for the other
    tools: one line 'text_to_tokens: error: ...', exit code 2, no output file."""
    tool = [sys.executable, str(SRC / "launch/text_to_tokens.py"), str(tmp_path / "out.u16")]
    (tmp_path / "bin.dat2").write_bytes(b"\0\1\2")
    os.mkfifo(tmp_path / "fifo")
    for inputs, needle in [([str(tmp_path / "nope.txt")], "cannot read"),
                           ([str(tmp_path / "fifo")], "not a regular file or directory"),
                           ([str(tmp_path / "bin.dat2")], f"no text found in the inputs (skipped as binary: "
                                                          f"{tmp_path / 'bin.dat2'})")]:
        p = subprocess.run(tool + inputs, capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.splitlines() == [p.stderr.strip()], p.stderr
        assert p.stderr.startswith("text_to_tokens: error: ") and needle in p.stderr, p.stderr
        assert not (tmp_path / "out.u16").exists()
