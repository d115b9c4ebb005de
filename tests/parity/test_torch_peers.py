"""The PyTorch peers of the multi-GPU benchmarks, run on the CPU with 2 processes (gloo): launch/torch_bench.py under
DDP and launch/torch_allreduce_bench.py.

Each multi-process test starts `python -m torch.distributed.run --nproc_per_node 2` (torchrun) on a free port and
checks the values in the JSON record rank 0 writes. Skips without torch or without torch.distributed's gloo backend.
Debian's torch 1.13 under Python 3.11 cannot parse torchrun's default --redirects/--tee ("0": Python 3.11's IntFlag
iteration skips Std.NONE); the per-rank form naming a rank that does not exist ("9:1") means "no redirection" there
and in every later torch.
"""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

REPO = Path(__file__).resolve().parents[2]
TORCH_BENCH = REPO / "launch" / "torch_bench.py"
ALLREDUCE_BENCH = REPO / "launch" / "torch_allreduce_bench.py"
TIMEOUT_S = 120
FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
NPROC = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict:
    # the opposite of what the scripts force: their records must still show NVLink multicast off
    env = dict(os.environ, OMP_NUM_THREADS="1", NCCL_NVLS_ENABLE="1", TORCH_SYMM_MEM_DISABLE_MULTICAST="0")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)   # a test run inside some other distributed job must not join it
    return env


def torchrun(script: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(NPROC),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--redirects", "9:1", "--tee", "9:1",
           str(script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=child_env())


def output(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-4000:]}"


# ---------------------------------------------------------------------------------------------------------------------
# launch/torch_bench.py
# ---------------------------------------------------------------------------------------------------------------------
TINY = ["--preset", "tiny", "--device", "cpu", "--warmup", "1", "--steps", "2"]


@pytest.mark.parametrize("parallel", [[], ["--parallel", "ddp"]], ids=["default", "parallel_ddp"])
def test_torch_bench_ddp_two_ranks(tmp_path, parallel):
    out = tmp_path / "ddp.json"
    proc = torchrun(TORCH_BENCH, *TINY, *parallel, "--json", str(out))
    assert proc.returncode == 0, output(proc)
    r = json.loads(out.read_text())
    assert r["status"] == "ok" and r["error"] is None
    c = r["config"]
    assert (c["world_size"], c["batch"], c["global_batch"], c["bucket_cap_mb"], c["ddp_static_graph"],
            c["backend"], c["mode"], c["phase"], c["parallel"]) == \
        (2, 4, 8, 25.0, False, "gloo", "fp32", "train_step", "ddp")
    assert not any(k.startswith("fsdp_") for k in c)
    step = r["timing"]["step"]
    assert step["samples"] == 2 and len(step["times_ms"]) == 2
    assert all(math.isfinite(t) and t > 0 for t in step["times_ms"] + step["rank_mean_ms"])
    assert len(step["rank_mean_ms"]) == 2
    # each step's time is the slowest rank's, so the mean is at least every rank's own mean
    assert step["mean_ms"] >= max(step["rank_mean_ms"]) * (1 - 1e-9)
    assert r["throughput"]["tokens_per_s"] == pytest.approx(8 * 64 / (step["mean_ms"] / 1e3), rel=1e-9)
    assert r["memory"] == {"peak_bytes": None, "peak_bytes_per_rank": [None, None]}   # cpu: not measured
    assert r["machine"]["env"] == FORCED_ENV
    assert proc.stdout.count("# torch_bench") == 1, output(proc)   # only rank 0 prints
    assert "per rank x 2 ranks (DDP, bucket 25 MB" in proc.stdout


def test_torch_bench_ddp_error_is_one_record_and_exit_1(tmp_path):
    out = tmp_path / "ddp.json"   # mode compiled needs CUDA: an error on every rank, before any collective
    proc = torchrun(TORCH_BENCH, *TINY, "--mode", "compiled", "--json", str(out))
    assert proc.returncode != 0, output(proc)
    r = json.loads(out.read_text())
    assert r["status"] == "error" and r["error"].startswith("rank 0: RuntimeError: mode 'compiled' needs CUDA")
    assert "timing" not in r and r["config"]["world_size"] == 2


def test_torch_bench_single_process_has_no_ddp_keys(tmp_path):
    out = tmp_path / "one.json"
    proc = subprocess.run([sys.executable, str(TORCH_BENCH), *TINY, "--json", str(out)], capture_output=True,
                          text=True, timeout=TIMEOUT_S, env=child_env())
    assert proc.returncode == 0, output(proc)
    r = json.loads(out.read_text())
    assert r["status"] == "ok"
    assert not {"world_size", "global_batch", "bucket_cap_mb"} & set(r["config"])
    assert "rank_mean_ms" not in r["timing"]["step"] and r["memory"] == {"peak_bytes": None}
    assert r["throughput"]["tokens_per_s"] == pytest.approx(4 * 64 / (r["timing"]["step"]["mean_ms"] / 1e3))


DDP_GRAD_WORKER = """
import json, sys
import torch
import torch.distributed as dist
sys.path.insert(0, {launch!r})
import torch_bench as tb
import reference_model as ref

ctx = tb.init_distributed("cpu")
cfg = tb.preset_config("tiny", None, 16)
torch.manual_seed(0)
model = ref.TransformerLM(cfg, dtype=torch.float64)
args = tb.parse_args(["--device", "cpu", "--bucket-cap-mb", "0.05"])   # several buckets; --parallel ddp by default
ddp = tb.wrap_data_parallel(tb.LossModule(model), args, ctx)   # as run_one wraps it
assert isinstance(ddp, torch.nn.parallel.DistributedDataParallel) and args.parallel == "ddp"
x, y = tb.make_batch(cfg, 2, 7 + ctx.rank, "cpu")   # as run_one: seed + rank
loss = ddp(x, y)
loss.backward()
losses = [None] * ctx.world_size
dist.all_gather_object(losses, loss.item())
if ctx.rank == 0:
    torch.manual_seed(0)
    single = ref.TransformerLM(cfg, dtype=torch.float64)
    batches = [tb.make_batch(cfg, 2, 7 + r, "cpu") for r in range(ctx.world_size)]
    ref_loss = tb.LossModule(single)(torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    ref_loss.backward()
    grad_err = max(((p.grad - q.grad).abs().max() / q.grad.abs().max()).item()
                   for p, q in zip(model.parameters(), single.parameters()))
    json.dump({{"rank_losses": losses, "ref_loss": ref_loss.item(), "grad_err": grad_err,
               "same_tokens": bool(torch.equal(batches[0][0], batches[1][0]))}}, open(sys.argv[1], "w"))
dist.destroy_process_group()
"""


def test_ddp_two_ranks_equals_one_process_on_the_concatenated_batch(tmp_path):
    """torch_bench's own pieces (init_distributed, parse_args and wrap_data_parallel with --parallel ddp, make_batch
    with seed + rank) in float64: the mean of the ranks' losses and DDP's averaged gradient equal one process's loss and
    gradient on both ranks' rows."""
    worker = tmp_path / "ddp_grad_worker.py"
    worker.write_text(DDP_GRAD_WORKER.format(launch=str(REPO / "launch")))
    out = tmp_path / "grad.json"
    proc = torchrun(worker, str(out))
    assert proc.returncode == 0, output(proc)
    r = json.loads(out.read_text())
    assert not r["same_tokens"]   # every rank has its own data
    assert sum(r["rank_losses"]) / 2 == pytest.approx(r["ref_loss"], rel=1e-12)
    assert r["grad_err"] < 1e-10


# ---------------------------------------------------------------------------------------------------------------------
# launch/torch_allreduce_bench.py
# ---------------------------------------------------------------------------------------------------------------------
def test_allreduce_bench_two_ranks(tmp_path):
    out = tmp_path / "allreduce.json"
    proc = torchrun(ALLREDUCE_BENCH, "--device", "cpu", "--sizes", "4096", "64K", "--warmup", "2", "--iters", "5",
                    "--json", str(out))
    assert proc.returncode == 0, output(proc)
    r = json.loads(out.read_text())
    assert (r["schema"], r["status"], r["world_size"], r["backend"], r["op"], r["dtype"]) == \
        ("torch_allreduce_bench/1", "ok", 2, "gloo", "all_reduce", "float32")
    assert [row["size_bytes"] for row in r["results"]] == [4096, 65536]
    assert r["machine"]["env"] == FORCED_ENV
    n = r["world_size"]
    for row in r["results"]:
        assert row["wrong"] == 0
        assert row["count"] == row["size_bytes"] // 4
        assert math.isfinite(row["time_us"]) and 0 < row["time_us"] <= row["time_us_max"] * (1 + 1e-12)
        assert row["algbw_gbs"] == pytest.approx(row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9, rel=1e-12)
        assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (n - 1) / n, rel=1e-12)
    table = [line.split() for line in proc.stdout.splitlines() if line and not line.startswith("#")]
    assert [(int(t[0]), int(t[1]), int(t[5])) for t in table] == [(4096, 1024, 0), (65536, 16384, 0)], output(proc)
    assert "# wrong: 0  OK" in proc.stdout


def test_allreduce_bench_counts_wrong_elements_and_parses_sizes(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")   # the import forces both; monkeypatch undoes it afterwards
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")
    monkeypatch.syspath_prepend(str(REPO / "launch"))
    import importlib

    import torch_allreduce_bench as ar
    import torch_bench  # (the forcing runs on its import, which another test file may have done first: again)
    importlib.reload(torch_bench)
    assert {k: os.environ[k] for k in FORCED_ENV} == FORCED_ENV
    assert ar.count_wrong(torch.tensor([3.0, 3.0, 2.0, 3.5]), 2) == 2
    assert ar.count_wrong(torch.full((8,), 10.0), 4) == 0
    assert [ar.parse_size(s) for s in ["4096", "64K", "1M", "16MB", "1G", "0.5G"]] == \
        [4096, 65536, 1 << 20, 16 << 20, 1 << 30, 1 << 29]
    for bad in ["4095", "0", "1T", "M"]:
        with pytest.raises(Exception):
            ar.parse_size(bad)
