"""launch/torch_bench.py's activation checkpointing (--checkpoint block) and its --help without PyTorch.

--help must work under a python3 that has no torch (it is the first thing a user runs on a new machine); a run
without torch is one error line. With torch: a checkpointed tiny CPU run records config.checkpoint, and the
checkpointed model (torch_bench.checkpoint_blocks) gives the same loss and gradients as the plain one in float64.
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
