"""job attention_bench on the CPU: the attention_bench section chooses the grid, the implementations and the longest
sequence, bench.warmup_steps / measure_steps the calls a point; every point of the small grid is in the record, naive
and flash2 (the CPU's tiled reference) both ran, and the naive point's memory holds its [seq, seq] probabilities.
"""
import json
import os
import pathlib
import subprocess

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BIN = os.environ.get("TRAINER_BIN")
pytestmark = pytest.mark.skipif(not BIN, reason="TRAINER_BIN is not set")


def test_a_small_grid_b_on_the_cpu(tmp_path):
    out = tmp_path / "ab.json"
    p = subprocess.run([BIN, str(SRC / "configs/attention_bench.json"), "--set", "device=cpu", "--set",
                        "precision=fp32", "--set", "bench.warmup_steps=0", "--set", "bench.measure_steps=1",
                        "--set", 'attention_bench.grids=["b"]', "--set", "attention_bench.max_seq=256",
                        "--set", f"output.results={out}"],
                       capture_output=True, text=True, timeout=300, cwd=SRC,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["status"] == "ok"
    ab = r["attention_bench"]
    assert ab["warmup"] == 0 and ab["iters"] == 1
    rows = ab["rows"]
    # grid b: bf16 and f32, d_head 16, 32, 64, 128, seq 128 and 256, naive and flash2
    assert len(rows) == 2 * 4 * 2 * 2
    assert {x["grid"] for x in rows} == {"b"} and {x["seq"] for x in rows} == {128, 256}
    for x in rows:
        if x["dtype"] == "bf16":
            assert x["status"] == "skipped", x  # bf16 needs the CUDA backend
            continue
        assert x["status"] == "ok", x
        assert x["forward_ms"] > 0 and x["backward_ms"] > 0 and x["forward_backward_ms"] > 0
        if x["impl"] == "naive":  # the fp32 probabilities [1, 1, seq, seq] are in memory before the backward
            assert x["mem_before_backward_bytes"] >= 4 * x["seq"] ** 2
    assert {x["impl"] for x in rows} == {"naive", "flash2"}


def test_only_the_implementations_asked_for(tmp_path):
    out = tmp_path / "ab.json"
    p = subprocess.run([BIN, str(SRC / "configs/attention_bench.json"), "--set", "device=cpu", "--set",
                        "precision=fp32", "--set", "bench.warmup_steps=0", "--set", "bench.measure_steps=1",
                        "--set", 'attention_bench.grids=["b"]', "--set", 'attention_bench.impls=["flash2"]',
                        "--set", "attention_bench.max_seq=128", "--set", f"output.results={out}"],
                       capture_output=True, text=True, timeout=300, cwd=SRC)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(out.read_text())["attention_bench"]["rows"]
    assert len(rows) == 2 * 4 and {x["impl"] for x in rows} == {"flash2"}
