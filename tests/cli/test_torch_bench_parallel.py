"""launch/torch_bench.py --parallel ddp|fsdp2: the refusals, argument handling and FSDP2 wiring that run without FSDP2.

The fsdp2 path itself (real fully_shard, DTensor parameters, NCCL) needs PyTorch >= 2.4 and has not been run; here,
under Debian's torch 1.13: --parallel fsdp2 is one error line naming the PyTorch it needs, before any process group is
joined (a joined group would wait for a rank that never comes); with a stand-in FSDP2 API, the other refusals, the
order of compile and fully_shard calls on every block and the root with each mode's mixed-precision dtypes, the
record's config keys, and which module of torch.distributed supplies fully_shard (2.6's before 2.4's). --parallel ddp
(the default) is checked end to end under torchrun in tests/parity/test_torch_peers.py.
"""
import os
import pathlib
import socket
import subprocess
import sys
import types

import pytest

SRC = pathlib.Path(os.environ.get("TRAINER_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BENCH = SRC / "launch" / "torch_bench.py"
NO_TORCH = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = [{path!r}] + sys.argv[1:]; "
            "runpy.run_path({path!r}, run_name='__main__')")


def torch_bench_module():
    sys.path.insert(0, str(SRC / "launch"))
    import torch_bench as tb
    return tb


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_help_names_parallel_without_torch():
    p = subprocess.run([sys.executable, "-c", NO_TORCH.format(path=str(BENCH)), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "--parallel {ddp,fsdp2}" in p.stdout and "NOT YET RUN ANYWHERE" in p.stdout


@pytest.mark.parametrize("torchrun_env", [False, True])
def test_fsdp2_without_fully_shard_is_one_error_line_before_any_process_group(torchrun_env):
    torch = pytest.importorskip("torch")
    tb = torch_bench_module()
    if tb.fsdp2_api() is not None:
        pytest.skip(f"skipped: torch {torch.__version__} has FSDP2, so --parallel fsdp2 is not refused")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    if torchrun_env:   # rank 0 of 2: init_process_group would wait for rank 1 until the timeout below
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    p = subprocess.run([sys.executable, str(BENCH), "--parallel", "fsdp2", "--preset", "tiny", "--device", "cpu"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert [line for line in lines if "error" in line] == [lines[-1]] and p.stdout == ""
    assert lines[-1] == ("torch_bench.py: error: --parallel fsdp2 needs PyTorch >= 2.4 "
                         "(torch.distributed.fsdp.fully_shard; in 2.4 and 2.5 torch.distributed._composable.fsdp); "
                         f"this is torch {torch.__version__}"), p.stderr
    assert "Traceback" not in p.stderr


def test_release_parses_torch_versions():
    tb = torch_bench_module()
    assert [tb.release(v) for v in ["1.13.0a0", "2.4.0", "2.5.1+cu124", "2.6.0.dev20241112", "2.10.0a0+git1234"]] \
        == [(1, 13), (2, 4), (2, 5), (2, 6), (2, 10)]
    assert tb.FSDP2_MIN_TORCH == (2, 4)


# ---- a stand-in FSDP2 API ---------------------------------------------------------------------------------------
class FakeMixedPrecisionPolicy:
    def __init__(self, param_dtype=None, reduce_dtype=None):
        self.param_dtype, self.reduce_dtype = param_dtype, reduce_dtype


class FakeFSDP2:
    """(fully_shard, MixedPrecisionPolicy, init_device_mesh) that record their calls and change nothing."""

    def __init__(self):
        self.calls, self.meshes = [], []

    def fully_shard(self, module, **kwargs):
        self.calls.append((module, kwargs))
        return module

    def init_device_mesh(self, device_type, mesh_shape):
        self.meshes.append((device_type, mesh_shape))
        return ("mesh", device_type, mesh_shape)

    def api(self):
        return self.fully_shard, FakeMixedPrecisionPolicy, self.init_device_mesh


def parse(tb, monkeypatch, argv, world_size=None):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    if world_size is not None:
        monkeypatch.setenv("WORLD_SIZE", str(world_size))
    return tb.parse_args(["--preset", "tiny", "--device", "cpu", *argv])


@pytest.mark.parametrize("argv,world_size,says", [
    (["--parallel", "fsdp2"], None, "--parallel fsdp2 shards over the ranks of a torchrun job: start it with torchrun"),
    (["--parallel", "fsdp2"], 1, "--parallel fsdp2 shards over the ranks of a torchrun job"),
    (["--parallel", "fsdp2", "--bucket-cap-mb", "25"], 2, "--bucket-cap-mb: DDP's options, not for --parallel fsdp2"),
    (["--parallel", "fsdp2", "--ddp-static-graph"], 2, "--ddp-static-graph: DDP's options, not for --parallel fsdp2"),
    (["--parallel", "fsdp2", "--bucket-cap-mb", "5", "--ddp-static-graph"], 2,
     "--bucket-cap-mb and --ddp-static-graph: DDP's options"),
    (["--parallel", "fsdp2", "--sweep"], 2, "--sweep runs in one process"),
    (["--parallel", "fsdp2", "--mode", "compiled", "--compile-mode", "best"], 2, "not torchrun"),
    (["--parallel", "ddp", "--bucket-cap-mb", "0"], 2, "need --bucket-cap-mb > 0"),
])
def test_parallel_refusals_are_one_error_line(monkeypatch, capsys, argv, world_size, says):
    pytest.importorskip("torch")
    tb = torch_bench_module()
    monkeypatch.setattr(tb, "fsdp2_api", FakeFSDP2().api)
    with pytest.raises(SystemExit) as e:
        parse(tb, monkeypatch, argv, world_size)
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert ": error: " in lines[-1] and says in lines[-1].split(": error: ", 1)[1], lines


def test_parallel_arguments(monkeypatch):
    pytest.importorskip("torch")
    tb = torch_bench_module()
    monkeypatch.setattr(tb, "fsdp2_api", FakeFSDP2().api)
    default = parse(tb, monkeypatch, [])
    assert (default.parallel, default.bucket_cap_mb, default.ddp_static_graph) == ("ddp", 25.0, False)
    ddp = parse(tb, monkeypatch, ["--parallel", "ddp", "--bucket-cap-mb", "50", "--ddp-static-graph"], 2)
    assert (ddp.parallel, ddp.bucket_cap_mb, ddp.ddp_static_graph) == ("ddp", 50.0, True)
    fsdp2 = parse(tb, monkeypatch, ["--parallel", "fsdp2", "--mode", "bf16", "--checkpoint", "block"], 2)
    assert (fsdp2.parallel, fsdp2.bucket_cap_mb, fsdp2.checkpoint) == ("fsdp2", None, "block")


def test_fsdp2_api_prefers_torch_distributed_fsdp(monkeypatch):
    """Where torch.distributed.fsdp has fully_shard (PyTorch >= 2.6) it is used; else _composable.fsdp (2.4, 2.5)."""
    torch = pytest.importorskip("torch")
    tb = torch_bench_module()
    new, old = object(), object()
    monkeypatch.setattr(torch, "__version__", "2.6.0", raising=False)
    monkeypatch.setitem(sys.modules, "torch.distributed.device_mesh", types.SimpleNamespace(init_device_mesh="mesh"))
    monkeypatch.setitem(sys.modules, "torch.distributed._composable.fsdp",
                        types.SimpleNamespace(fully_shard=old, MixedPrecisionPolicy="mp_old"))
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp",
                        types.SimpleNamespace(fully_shard=new, MixedPrecisionPolicy="mp_new"))
    assert tb.fsdp2_api() == (new, "mp_new", "mesh")
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", types.SimpleNamespace())   # 2.4 / 2.5: FSDP1 only
    assert tb.fsdp2_api() == (old, "mp_old", "mesh")
    monkeypatch.setattr(torch, "__version__", "2.3.1")   # older than FSDP2_MIN_TORCH: never used
    assert tb.fsdp2_api() is None


# Each mode's MixedPrecisionPolicy, from DESIGN.md's precisions: autocast modes keep fp32 weights and compute in bf16
# (bf16 gathers, fp32 reduction); fp32 and the bf16-built compiled_pure use the weights' dtype (None, None).
EXPECTED_MP = {"fp32": (None, None), "bf16": ("bfloat16", "float32"), "compiled": ("bfloat16", "float32"),
               "compiled_pure": (None, None)}


@pytest.mark.parametrize("mode", ["fp32", "bf16", "compiled", "compiled_pure"])
@pytest.mark.parametrize("checkpoint", [False, True])
def test_wrap_fsdp2_shards_every_block_then_the_root(monkeypatch, mode, checkpoint):
    torch = pytest.importorskip("torch")
    tb = torch_bench_module()
    import reference_model as ref
    fake = FakeFSDP2()
    monkeypatch.setattr(tb, "fsdp2_api", fake.api)
    compiled = []

    class FakeCompiled(torch.nn.Module):
        """What the stand-in torch.compile returns: the module kept as _orig_mod, as in torch's OptimizedModule."""

        def __init__(self, module):
            super().__init__()
            self._orig_mod = module

    def fake_compile(module, mode=None):
        compiled.append((module, mode))
        return FakeCompiled(module)

    monkeypatch.setattr(torch, "compile", fake_compile, raising=False)   # torch 1.13 has none
    cfg = tb.preset_config("tiny", None, 16)
    model = ref.TransformerLM(cfg)
    if checkpoint:
        tb.checkpoint_blocks(model)
    blocks = list(model.layers)
    params = list(model.parameters())
    loss_fn = tb.LossModule(model)
    args = types.SimpleNamespace(parallel="fsdp2", mode=mode, device="cpu", compile_mode="max-autotune-no-cudagraphs",
                                 bucket_cap_mb=None, ddp_static_graph=False, batch=3)
    ctx = tb.DistContext(rank=0, local_rank=0, world_size=2, backend="gloo")
    assert tb.wrap_data_parallel(loss_fn, args, ctx) is loss_fn
    assert fake.meshes == [("cpu", (2,))]
    mesh = ("mesh", "cpu", (2,))
    is_compiled = mode in ("compiled", "compiled_pure")
    assert [m for m, _ in compiled] == (blocks if is_compiled else [])   # each block once, in order
    assert all(m == "max-autotune-no-cudagraphs" for _, m in compiled)
    assert len(fake.calls) == cfg.num_layers + 1
    for i, (module, kwargs) in enumerate(fake.calls[:-1]):
        assert module is model.layers[i]   # the module now in the model: sharded after compiling
        inner = module._orig_mod if is_compiled else module
        assert inner is blocks[i] and isinstance(inner, tb.CheckpointedBlock if checkpoint else ref.Block)
        assert set(kwargs) == {"mesh", "mp_policy", "reshard_after_forward"}
        assert kwargs["mesh"] == mesh and kwargs["reshard_after_forward"] is True
    root, root_kwargs = fake.calls[-1]
    assert root is loss_fn and set(root_kwargs) == {"mesh", "mp_policy"} and root_kwargs["mesh"] == mesh
    for _, kwargs in fake.calls:
        mp = kwargs["mp_policy"]
        got = tuple(None if d is None else str(d).replace("torch.", "") for d in (mp.param_dtype, mp.reduce_dtype))
        assert got == EXPECTED_MP[mode]
    assert list(map(id, loss_fn.parameters())) == list(map(id, params))   # the same parameters, in model order

    c = tb.parallel_config(args, ctx)
    weights = "bf16" if mode == "compiled_pure" else "fp32"
    assert c == {"world_size": 2, "global_batch": 6, "backend": "gloo", "parallel": "fsdp2",
                 "fsdp_reshard_after_forward": True,
                 "fsdp_param_dtype": "bf16" if mode in ("bf16", "compiled") else weights,
                 "fsdp_reduce_dtype": "fp32" if mode in ("bf16", "compiled") else weights,
                 "fsdp_compile": "per_block" if is_compiled else None}
    header_args = types.SimpleNamespace(**vars(args), ctx=16, vocab=None, warmup=1, steps=2, checkpoint="none")
    header = tb.table_header({"cpu_threads": 1, "torch": "x"}, header_args, 2)
    assert "3 per rank x 2 ranks (FSDP2 fully_shard per block and root" in header
    assert ("bf16 gathers, fp32 reduce-scatter" in header) == (mode in ("bf16", "compiled"))


def test_wrap_data_parallel_one_process_and_ddp_config(monkeypatch):
    pytest.importorskip("torch")
    tb = torch_bench_module()
    import reference_model as ref
    monkeypatch.setattr(tb, "fsdp2_api", lambda: pytest.fail("FSDP2 used without --parallel fsdp2"))
    loss_fn = tb.LossModule(ref.TransformerLM(tb.preset_config("tiny", None, 16)))
    args = types.SimpleNamespace(parallel="ddp", mode="bf16", device="cpu", compile_mode="default", bucket_cap_mb=25.0,
                                 ddp_static_graph=False, batch=4)
    assert tb.wrap_data_parallel(loss_fn, args, None) is loss_fn   # one process, eager: unwrapped
    ctx = tb.DistContext(rank=1, local_rank=1, world_size=4, backend="nccl")
    assert tb.parallel_config(args, ctx) == {"world_size": 4, "global_batch": 16, "backend": "nccl",
                                             "parallel": "ddp", "bucket_cap_mb": 25.0, "ddp_static_graph": False,
                                             "ddp_broadcast_buffers": False}
