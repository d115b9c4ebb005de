"""launch/bench_sweep.py: the benchmark sweep (CS336 a2 section 2.1.3) against real trainer runs on the CPU.

- --handout sets the handout's model (naive attention, no recompute, AdamW after the backward, no CUDA graph), so the
  table's forward / backward / optimizer columns hold the record's numbers (the optimizer's > 0);
- OUT/*.json are the records only (the summary is OUT/.sweep.json), and a record an earlier sweep left is never
  reported as this one's: a refused run is an ERROR row and the exit status is 1;
- bad arguments: exit 2 before anything runs.

Run: TRAINER_BIN=build/trainer TRAINER_SOURCE_DIR=. /usr/bin/python3 -m pytest tests/cli/test_bench_sweep.py
"""
import glob
import json
import os
import pathlib
import subprocess
import sys

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")
CPU = ["--set", "device=cpu", "--set", "model.num_layers=1", "--set", "data.batch_size=2"]


def sweep(tmp_path, *args):
    cmd = [sys.executable, str(SRC / "launch" / "bench_sweep.py"), "--trainer", BIN, "--configs",
           str(SRC / "configs"), "--sizes", "tiny", "--precisions", "fp32", "--steps", "2", "--warmups", "0",
           "--out", str(tmp_path / "out"), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_handout_setting_and_phase_columns(tmp_path):
    p = sweep(tmp_path, "--handout", "--phases", "forward", "train_step", *CPU)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "out"
    # what a shell's OUT/*.json names (glob.glob skips dot files as the shell does): the records, not the summary
    records = sorted(pathlib.Path(x).name for x in glob.glob(str(out / "*.json")))
    assert records == ["tiny_fp32_forward_w0.json", "tiny_fp32_train_step_w0.json"]
    summary = json.loads((out / ".sweep.json").read_text())
    assert [s["status"] for s in summary] == ["ok", "ok"]
    r = json.loads((out / "tiny_fp32_train_step_w0.json").read_text())
    c = r["config"]
    assert c["attention"] == "naive" and c["checkpointing"]["policy"] == "none"
    assert c["optimizer"]["in_backward"] is False and c["cuda_graph"] is False
    t = r["timing"]
    assert t["optimizer"]["mean_ms"] > 0
    row = [line for line in p.stdout.splitlines() if line.startswith("tiny    fp32  train_step")][-1]
    cols = row.split("|")[2].split()  # forward, backward, optimizer means
    assert [float(x) for x in cols] == pytest.approx(
        [t["forward"]["mean_ms"], t["backward"]["mean_ms"], t["optimizer"]["mean_ms"]], abs=0.006)


def test_a_refused_run_is_an_error_row_not_an_earlier_record(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    stale = {"schema": "trainer.result/1", "status": "ok", "timing": {"step": {"mean_ms": 1.0}}}
    (out / "tiny_fp32_train_step_w0.json").write_text(json.dumps(stale))
    p = sweep(tmp_path, "--phases", "train_step", *CPU, "--set", "data.batch_size=-1")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ERROR: exit 2" in p.stdout and "batch_size" in p.stdout, p.stdout


@pytest.mark.parametrize("args, needle", [(["--steps", "0"], "--steps"), (["--phases", "fwd"], "--phases"),
                                          (["--sizes", "huge"], "--sizes")])
def test_bad_arguments(tmp_path, args, needle):
    p = sweep(tmp_path, *args)
    assert p.returncode == 2 and needle in p.stderr and not (tmp_path / "out").exists(), p.stderr
