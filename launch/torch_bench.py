#!/usr/bin/env python3
"""PyTorch peer of the trainer's benchmarks: the same model (tests/parity/reference_model.py), timed the same way.

    # one configuration, one JSON record
    python launch/torch_bench.py --preset xl --mode compiled --phase train_step --batch 4 --ctx 512 \
        --warmup 5 --steps 10 --json results/torch_xl_compiled.json
    # PyTorch at its best (every speed ratio against the peer uses this): the fastest of three torch.compile modes
    python launch/torch_bench.py --preset xl --mode compiled --compile-mode best --json results/torch_xl_best.json
    # every preset x mode x phase, each in a fresh subprocess (an OOM or compile cache cannot leak into the next)
    python launch/torch_bench.py --sweep --json results/torch_sweep.json
    # CPU smoke test (Debian's torch 1.13; eager modes only)
    /usr/bin/python3 launch/torch_bench.py --device cpu --preset tiny --warmup 1 --steps 2
    # data parallel: one process per GPU, --batch rows per rank (here 2 x 4 = 8 rows a step)
    torchrun --nproc_per_node 2 launch/torch_bench.py --preset xl --mode bf16 --batch 4 --ctx 512 \
        --warmup 5 --steps 10 --bucket-cap-mb 25 --json results/torch_xl_bf16_ddp2.json
    # the same sharded by FSDP2 (PyTorch >= 2.4; not yet run anywhere, see Data parallel below)
    torchrun --nproc_per_node 2 launch/torch_bench.py --preset xl --mode compiled --batch 4 --ctx 512 \
        --parallel fsdp2 --json results/torch_xl_compiled_fsdp2.json

Modes (ANCHORS.md uses the same three):
  fp32      eager, strict fp32 (TF32 off), naive attention (materialised scores), the course's AdamW
  bf16      eager, torch.autocast bf16 (fp32 master weights), naive attention, fused torch.optim.AdamW
  compiled  bf16 autocast + F.scaled_dot_product_attention + torch.compile + fused torch.optim.AdamW
  compiled_pure  the model built in bf16 (parameters, gradients and AdamW state bf16, as the 8B leaderboard's
            reference: BasicsTransformerLM with torch_dtype bfloat16) + SDPA + torch.compile + fused AdamW, no autocast
            (the trainer's precision bf16_pure)
--compile-mode picks torch.compile's mode (default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs) for
the compiled modes; the record's config.compile_mode names it. --compile-mode best runs the same configuration once
per mode of default, reduce-overhead and max-autotune-no-cudagraphs, each in a fresh subprocess (as --sweep does,
each with --timeout; about three compiles' time), prints a row per mode as it finishes and then the fastest
(smallest mean step time among status ok). --json writes the fastest mode's record, with compile_mode_chosen and
compile_modes added: [{mode, status, mean_ms, peak_bytes, wall_s, error}] for every mode tried. If no mode ran, the
record is the first mode's (status oom, error or timeout) with compile_mode_chosen null. With --sweep, every compiled
row is the best of the three (the eager rows run once). Refused for the eager modes and under torchrun.
--optimizer overrides the optimizer. torch.optim.AdamW is not quite the course's AdamW: it adds eps to
sqrt(v / (1 - b2^t)) instead of to sqrt(v) (the same update with eps scaled by sqrt(1 - b2^t)); the decay
p *= 1 - lr wd and everything else are the same. With eps = 1e-8 the difference is invisible in timing.
Phases: forward (the loss, autograd on unless --forward-no-grad, graph dropped), forward_backward, train_step
(zero grads, forward, backward, optional clipping, optimizer step). Random tokens, the same batch every step.

Activation checkpointing (--checkpoint block): every Transformer block runs under
torch.utils.checkpoint.checkpoint(block, x, ..., use_reentrant=False), so only each block's input is kept and its
forward is recomputed in the backward (the trainer's checkpointing.policy "full"); recorded as config.checkpoint.
For the long-context comparisons, e.g. xl bf16 batch 4 at ctx 8192 and 16384:
    python launch/torch_bench.py --preset xl --mode compiled --batch 4 --ctx 16384 --checkpoint block \
        --json results/torch_xl_compiled_ckpt_16k.json

Timing: `warmup` untimed steps, then `steps` steps, each between two CUDA events and followed by
torch.cuda.synchronize() (time.perf_counter on the CPU). Peak memory is torch.cuda.max_memory_allocated() over
warm-up and measured steps (parameters, grads and optimizer state included). An out-of-memory error gives a row
with status "oom"; any other error a row with status "error"; under --sweep (and --compile-mode best) a subprocess
still running after --timeout seconds is killed with everything it started and gives a row with status "timeout".
The process exits 0 for ok and oom, 1 for error and timeout.

Data parallel: under torchrun (WORLD_SIZE > 1 in the environment) each process joins a process group (nccl on cuda,
gloo on cpu), takes the GPU LOCAL_RANK and wraps the loss module as --parallel says (wrap_data_parallel):
  ddp (default)  torch.nn.parallel.DistributedDataParallel (--bucket-cap-mb, PyTorch's default 25; --ddp-static-graph;
            broadcast_buffers off, as the only buffers are the RoPE tables, the same on every rank; PyTorch's defaults
            otherwise). The compiled modes wrap in DDP first and then call torch.compile on the DDP module, so that
            dynamo's DDPOptimizer splits the graph at the bucket boundaries and the all-reduces overlap the backward.
  fsdp2     FSDP2 (PyTorch >= 2.4: torch.distributed.fsdp.fully_shard; in 2.4 and 2.5
            torch.distributed._composable.fsdp) over a 1-D mesh of all ranks, in torchtitan's order: --checkpoint
            block wraps each block, the compiled modes torch.compile each block, then fully_shard(block,
            reshard_after_forward=True) for every block and fully_shard(root) for the embedding, final norm and
            head. The optimizer is built afterwards, on the DTensor shards. Precision: bf16 and compiled are
            autocast over fp32 weights, so FSDP2 keeps fp32 sharded weights, gradients and AdamW state and uses
            MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32): weights gathered in bf16, gradients
            reduce-scattered in fp32. The autocast context stays on (with bf16 weights it only keeps its fp32 ops,
            softmax among them, in fp32), so activations are bf16 throughout, as in the trainer's precision bf16,
            where the ddp and single-GPU rows keep the residual stream in fp32. fp32 and compiled_pure (the model
            built in bf16) gather and reduce in the weights' own dtype. Refused (exit 2, before any process group is
            joined): on a torch without FSDP2; without torchrun (one process runs the plain model, the 1-GPU
            baseline); with --bucket-cap-mb or --ddp-static-graph. torch.compile's CUDA-graph modes
            (reduce-overhead, max-autotune) with fsdp2 are untried.
            NOT YET RUN ANYWHERE: written on a machine with torch 1.13 only (no FSDP2, no GPU); only its refusals,
            argument handling and wiring (with a stand-in fully_shard) are tested.
Every rank runs --batch rows of its own random tokens (seed + rank) and the same initial weights. Each rank times its
steps as above; the record's step times are the slowest rank's (all_reduce MAX of each step's time; rank_mean_ms lists
each rank's own mean), peak_bytes the largest over ranks (peak_bytes_per_rank lists them), tokens/s counts all ranks'
tokens. config gains world_size, global_batch, backend and parallel; with ddp bucket_cap_mb, ddp_static_graph and
ddp_broadcast_buffers, with fsdp2 fsdp_reshard_after_forward, fsdp_param_dtype, fsdp_reduce_dtype and fsdp_compile
(per_block or null); machine gains env (the two variables below) and, on cuda, gpus and nccl. Only rank 0 prints
and writes --json; every rank exits with the same code. A failure on some ranks only (an OOM on one GPU, say) can
leave the others waiting in a collective until NCCL's timeout. --sweep runs one process; it is refused under torchrun.
NCCL_NVLS_ENABLE=0 and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are forced (not defaulted) before torch loads: NVLink
multicast stays off on the multi-GPU machines this runs on.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

# Forced, not defaulted, before torch (and NCCL) load: NVLink multicast stays off even if the caller's environment
# turns it on. DDP records list them under machine.env.
FORCED_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
os.environ.update(FORCED_ENV)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "parity"))
try:
    import torch  # noqa: E402
    import torch.distributed as dist  # noqa: E402
    import torch.utils.checkpoint  # noqa: E402
    import reference_model as ref  # noqa: E402  (the one implementation of the model, shared with the parity tests)
except ImportError as e:   # --help still works; anything else stops in parse_args with one line
    torch = dist = ref = None
    TORCH_IMPORT_ERROR = str(e)

# The handout's Table 1 (src/config/presets.cpp): (vocab, context, d_model, d_ff, num_layers, num_heads).
# --vocab and --ctx override the first two. tiny (the trainer's test model) is for smoke tests on a CPU.
PRESETS: Dict[str, tuple] = {
    "tiny": (256, 64, 64, 172, 2, 4),
    "small": (10000, 512, 768, 3072, 12, 12),
    "medium": (10000, 512, 1024, 4096, 24, 16),
    "large": (10000, 512, 1280, 5120, 36, 20),
    "xl": (10000, 512, 2560, 10240, 32, 32),
    "10B": (10000, 512, 4608, 12288, 50, 36),
    "leaderboard_8b": (151936, 32768, 4096, 11008, 34, 32),
}


def preset_config(preset: str, vocab, ctx) -> "ref.ModelConfig":
    """The model of a preset, with vocab / ctx replaced where given (None: the preset's)."""
    p_vocab, p_ctx, d_model, d_ff, num_layers, num_heads = PRESETS[preset]
    return ref.ModelConfig(vocab_size=vocab or p_vocab, context_length=ctx or p_ctx, d_model=d_model, d_ff=d_ff,
                           num_layers=num_layers, num_heads=num_heads)
SWEEP_PRESETS = ["small", "medium", "large", "xl", "10B"]
MODES = ["fp32", "bf16", "compiled", "compiled_pure"]
COMPILED_MODES = ["compiled", "compiled_pure"]   # the modes that call torch.compile
COMPILE_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
# --compile-mode best runs each of these and keeps the fastest (PyTorch at its best: issue 19). max-autotune is left
# out: it is max-autotune-no-cudagraphs plus the CUDA graphs of reduce-overhead, and costs the longest compile.
BEST_COMPILE_MODES = ["default", "reduce-overhead", "max-autotune-no-cudagraphs"]
AUTOCAST_MODES = ["bf16", "compiled"]   # the modes that run under torch.autocast bf16 (fp32 weights)
PHASES = ["forward", "forward_backward", "train_step"]   # in order of memory use: an OOM skips the later phases
CHECKPOINTS = ["none", "block"]   # --checkpoint: none, or every block recomputed in the backward
PARALLELS = ["ddp", "fsdp2"]      # --parallel: the data-parallel wrapping under torchrun
FSDP2_MIN_TORCH = (2, 4)          # first release with FSDP2 (torch.distributed._composable.fsdp; 2.6: .fsdp)
DEFAULT_BUCKET_CAP_MB = 25.0      # PyTorch DDP's default bucket size
SCHEMA = "torch_bench.result/1"
GIB = 1024 ** 3


# ---------------------------------------------------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------------------------------------------------
if torch is not None:
    class LossModule(torch.nn.Module):
        """(inputs [B, T], targets [B, T]) -> mean cross-entropy; wraps the model so torch.compile sees the loss."""

        def __init__(self, model: torch.nn.Module):
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return ref.cross_entropy(self.model(x), y)

    class CheckpointedBlock(torch.nn.Module):
        """A block whose forward keeps only its inputs and is recomputed in the backward (non-reentrant
        torch.utils.checkpoint, which also replays the autocast state and works under torch.compile)."""

        def __init__(self, block: torch.nn.Module):
            super().__init__()
            self.block = block

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            return torch.utils.checkpoint.checkpoint(self.block, x, cos, sin, use_reentrant=False)


def checkpoint_blocks(model) -> None:
    """--checkpoint block: wraps every block of model.layers in CheckpointedBlock (parameters unchanged)."""
    model.layers = torch.nn.ModuleList(CheckpointedBlock(b) for b in model.layers)


@dataclass
class DistContext:
    """This process's place in a torchrun job. control: a gloo group for the small host-side exchanges after the
    timed steps (None: the default group, itself gloo on cpu), independent of NCCL's queue on the GPU."""
    rank: int
    local_rank: int
    world_size: int
    backend: str
    control: Optional[object] = None


def init_distributed(device: str) -> Optional[DistContext]:
    """Joins the torchrun job (nccl on cuda, gloo on cpu) when WORLD_SIZE > 1; None for a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    control = dist.new_group(backend="gloo") if backend != "gloo" else None
    return DistContext(rank=dist.get_rank(), local_rank=local_rank, world_size=dist.get_world_size(),
                       backend=backend, control=control)


def release(version: str) -> tuple:
    """(major, minor) of a torch version string: "2.5.1+cu124" -> (2, 5), "2.10.0a0+git" -> (2, 10)."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def fsdp2_api():
    """FSDP2's (fully_shard, MixedPrecisionPolicy, init_device_mesh), or None where this torch has none (older than
    FSDP2_MIN_TORCH, or built without torch.distributed). fully_shard lives in torch.distributed.fsdp from PyTorch 2.6
    on and in torch.distributed._composable.fsdp in 2.4 and 2.5; the first one found is used."""
    if torch is None or release(torch.__version__) < FSDP2_MIN_TORCH:
        return None
    try:
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError:
        return None
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            module = importlib.import_module(where)
        except ImportError:
            continue
        if hasattr(module, "fully_shard") and hasattr(module, "MixedPrecisionPolicy"):
            return module.fully_shard, module.MixedPrecisionPolicy, init_device_mesh
    return None


def make_batch(cfg: "ref.ModelConfig", batch: int, seed: int, device: str):
    """(inputs, targets) [batch, ctx] of uniform random tokens from a CPU generator seeded with `seed`."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, cfg.context_length + 1), generator=gen).to(device)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def wrap_ddp(module: torch.nn.Module, ctx: DistContext, bucket_cap_mb: float, static_graph: bool) -> torch.nn.Module:
    """DistributedDataParallel with PyTorch's defaults except broadcast_buffers (off: the RoPE tables are constant)."""
    device_ids = [ctx.local_rank] if ctx.backend == "nccl" else None
    return torch.nn.parallel.DistributedDataParallel(module, device_ids=device_ids, bucket_cap_mb=bucket_cap_mb,
                                                     broadcast_buffers=False, static_graph=static_graph)


def compile_module(module: torch.nn.Module, compile_mode: str) -> torch.nn.Module:
    """torch.compile(module) in --compile-mode (default: torch's default mode)."""
    return torch.compile(module, mode=None if compile_mode == "default" else compile_mode)


def fsdp2_dtypes(mode: str) -> tuple:
    """(param_dtype, reduce_dtype) of FSDP2's MixedPrecisionPolicy for a mode, None meaning the parameters' own dtype.
    bf16 / compiled (autocast over fp32 weights): fp32 sharded weights gathered in bf16, gradients reduce-scattered in
    fp32; fp32 and compiled_pure (the model built in its one dtype): gathered and reduced in that dtype."""
    return (torch.bfloat16, torch.float32) if mode in AUTOCAST_MODES else (None, None)


def wrap_fsdp2(loss_fn: "LossModule", args, ctx: DistContext) -> "LossModule":
    """--parallel fsdp2: FSDP2 over a 1-D mesh of all ranks, as torchtitan's parallelize (activation checkpointing,
    then per-block torch.compile, then fully_shard): each block of loss_fn.model.layers (a CheckpointedBlock under
    --checkpoint block) is compiled in the compiled modes, then fully_shard(block, reshard_after_forward=True); last
    fully_shard(loss_fn), the root, holds the embedding, final norm and head (FSDP2 keeps the root gathered between
    forward and backward). Parameters become DTensor shards in place: build the optimizer afterwards, from
    loss_fn.parameters(). Returns loss_fn itself. Not yet run anywhere (needs PyTorch >= 2.4)."""
    fully_shard, MixedPrecisionPolicy, init_device_mesh = fsdp2_api()
    mesh = init_device_mesh(args.device, (ctx.world_size,))
    param_dtype, reduce_dtype = fsdp2_dtypes(args.mode)
    mp_policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    layers = loss_fn.model.layers
    for i, block in enumerate(layers):
        if args.mode in COMPILED_MODES:
            block = compile_module(block, args.compile_mode)
            layers[i] = block
        fully_shard(block, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=True)
    fully_shard(loss_fn, mesh=mesh, mp_policy=mp_policy)
    return loss_fn


def wrap_data_parallel(loss_fn: "LossModule", args, ctx: Optional[DistContext]) -> torch.nn.Module:
    """The module that run_one calls: loss_fn as it is (one process), in DDP (torchrun, --parallel ddp) or sharded by
    FSDP2 (--parallel fsdp2, see wrap_fsdp2); in the compiled modes torch.compile is applied as each needs: on the
    whole module, after DDP (dynamo's DDPOptimizer splits the graph at the buckets), or per block before fully_shard."""
    if ctx is not None and args.parallel == "fsdp2":
        return wrap_fsdp2(loss_fn, args, ctx)
    if ctx is not None:
        loss_fn = wrap_ddp(loss_fn, ctx, args.bucket_cap_mb, args.ddp_static_graph)
    if args.mode in COMPILED_MODES:
        loss_fn = compile_module(loss_fn, args.compile_mode)
    return loss_fn


def parallel_config(args, ctx: DistContext) -> dict:
    """The record's config keys of a torchrun run: world size, global batch, backend, parallel and its settings."""
    c = {"world_size": ctx.world_size, "global_batch": args.batch * ctx.world_size, "backend": ctx.backend,
         "parallel": args.parallel}
    if args.parallel == "ddp":
        c.update(bucket_cap_mb=args.bucket_cap_mb, ddp_static_graph=args.ddp_static_graph, ddp_broadcast_buffers=False)
    else:
        param_dtype, reduce_dtype = fsdp2_dtypes(args.mode)
        weights = "bf16" if args.mode == "compiled_pure" else "fp32"
        c.update(fsdp_reshard_after_forward=True,
                 fsdp_param_dtype="bf16" if param_dtype == torch.bfloat16 else weights,
                 fsdp_reduce_dtype="fp32" if reduce_dtype == torch.float32 else weights,
                 fsdp_compile="per_block" if args.mode in COMPILED_MODES else None)
    return c


def machine_info(device: str) -> dict:
    info = {"host": socket.gethostname(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu_threads": torch.get_num_threads()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(gpu=props.name, gpu_memory_bytes=props.total_memory,
                    capability=f"{props.major}.{props.minor}", cudnn=torch.backends.cudnn.version())
    return info


def resolve_optimizer(mode: str, requested: str, device: str) -> str:
    if requested != "auto":
        return requested
    if mode == "fp32":
        return "course"
    return "fused" if device == "cuda" else "torch"


def make_optimizer(kind: str, params, lr: float, weight_decay: float):
    """course: reference_model.AdamW (per-parameter loop, as in the course); torch: torch.optim.AdamW's default
    implementation; fused: torch.optim.AdamW(fused=True), one CUDA kernel launch for all parameters."""
    betas, eps = (0.9, 0.999), 1e-8
    if kind == "course":
        return ref.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if kind == "torch":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if kind == "fused":
        try:
            return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        except TypeError as e:
            raise RuntimeError(f"torch {torch.__version__} has no fused AdamW: {e}") from None
    raise ValueError(f"unknown optimizer {kind!r}")


def is_oom(exc: BaseException) -> bool:
    """True for a CUDA (or host allocator) out-of-memory error, also when torch.compile wraps it in another error."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower():
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def time_stats(times_ms: List[float]) -> dict:
    return {"mean_ms": statistics.fmean(times_ms), "std_ms": statistics.pstdev(times_ms) if len(times_ms) > 1 else 0.0,
            "min_ms": min(times_ms), "median_ms": statistics.median(times_ms), "max_ms": max(times_ms),
            "samples": len(times_ms), "times_ms": times_ms}


def run_one(args, ctx: Optional[DistContext] = None) -> dict:
    """Builds the model, runs warm-up and measured steps of one phase, returns the record (status ok/oom/error).
    With ctx (torchrun), the model is wrapped in DDP and the record is this rank's own: see merge_ranks."""
    device = args.device
    rank = ctx.rank if ctx is not None else 0
    optimizer_kind = resolve_optimizer(args.mode, args.optimizer, device)
    cfg = preset_config(args.preset, args.vocab, args.ctx)
    compiled = args.mode in COMPILED_MODES
    attention = "sdpa" if compiled else "naive"
    record = {
        "schema": SCHEMA, "status": "error", "error": None,
        "config": {"preset": args.preset, "mode": args.mode, "phase": args.phase, "device": device,
                   "batch": args.batch, "ctx": cfg.context_length, "vocab": cfg.vocab_size, "d_model": cfg.d_model,
                   "d_ff": cfg.d_ff, "num_layers": cfg.num_layers, "num_heads": cfg.num_heads,
                   "warmup": args.warmup, "steps": args.steps,
                   "attention": attention, "optimizer": optimizer_kind, "max_grad_norm": args.max_grad_norm,
                   "forward_no_grad": args.forward_no_grad, "allow_tf32": False, "seed": args.seed,
                   "checkpoint": args.checkpoint,
                   "compile_mode": args.compile_mode if compiled else None,
                   "param_dtype": "bf16" if args.mode == "compiled_pure" else "fp32"},
        "machine": machine_info(device),
        "model": {"params": sum(math.prod(s) for s in ref.param_shapes(cfg).values())},
    }
    if ctx is not None:
        record["config"].update(parallel_config(args, ctx))
    t_start = time.perf_counter()
    try:
        if compiled and (device != "cuda" or not hasattr(torch, "compile")):
            raise RuntimeError(f"mode '{args.mode}' needs CUDA and torch >= 2.0 "
                               f"(device {device}, torch {torch.__version__})")
        # Strict fp32 in every mode: the bf16 modes do their matmuls in bf16 through autocast anyway.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.manual_seed(args.seed)
        param_dtype = torch.bfloat16 if args.mode == "compiled_pure" else torch.float32
        model = ref.TransformerLM(cfg, attention=attention, device=device, dtype=param_dtype)
        if args.checkpoint == "block":
            checkpoint_blocks(model)
        loss_fn = wrap_data_parallel(LossModule(model), args, ctx)
        x, y = make_batch(cfg, args.batch, args.seed + rank, device)
        params = list(model.parameters())   # after wrapping: under fsdp2 the DTensor shards
        optimizer = make_optimizer(optimizer_kind, params, lr=1e-3, weight_decay=0.01) \
            if args.phase == "train_step" else None
        autocast = (torch.autocast(device_type=device, dtype=torch.bfloat16) if args.mode in AUTOCAST_MODES
                    else contextlib.nullcontext())

        def step():
            if args.phase == "forward":
                with (torch.no_grad() if args.forward_no_grad else contextlib.nullcontext()), autocast:
                    loss_fn(x, y)
                return
            for p in params:
                p.grad = None
            with autocast:
                loss = loss_fn(x, y)
            loss.backward()
            if args.phase == "train_step":
                if args.max_grad_norm is not None:   # same rule as the course: min(1, max_norm / (norm + 1e-6))
                    torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
                optimizer.step()

        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if ctx is not None:   # start the first step together (the GPUs are idle after the synchronize)
            dist.barrier(group=ctx.control)
        times_ms = []
        for i in range(args.warmup + args.steps):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                step()
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                step()
                ms = (time.perf_counter() - t0) * 1e3
            if i >= args.warmup:
                times_ms.append(ms)
        timing = time_stats(times_ms)
        record.update(
            status="ok", timing={"step": timing},
            throughput={"tokens_per_s": args.batch * cfg.context_length / (timing["mean_ms"] / 1e3)},
            memory={"peak_bytes": torch.cuda.max_memory_allocated() if device == "cuda" else None})
    except Exception as e:   # noqa: BLE001: every failure becomes a row
        record["status"] = "oom" if is_oom(e) else "error"
        record["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:500]
        if record["status"] == "error":
            record["traceback"] = traceback.format_exc()[-4000:]
        if device == "cuda":
            record["memory"] = {"peak_bytes": torch.cuda.max_memory_allocated()}
    record["wall_s"] = time.perf_counter() - t_start
    return record


STATUS_ORDER = {"ok": 0, "oom": 1, "error": 2}


def nccl_version() -> Optional[str]:
    try:
        v = torch.cuda.nccl.version()
    except Exception:   # noqa: BLE001: a build without NCCL
        return None
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def merge_ranks(record: dict, ctx: DistContext) -> dict:
    """This rank's record -> the job's record, the same on every rank: the worst status over ranks (error > oom > ok)
    with the first such rank's error; each step's time the slowest rank's (all_reduce MAX), rank_mean_ms each rank's
    own mean; peak_bytes the largest over ranks; tokens/s over all ranks. Exchanged on the gloo control group."""
    mine = {"status": record["status"], "error": record.get("error"), "traceback": record.get("traceback"),
            "peak_bytes": (record.get("memory") or {}).get("peak_bytes"), "wall_s": record["wall_s"],
            "mean_ms": record["timing"]["step"]["mean_ms"] if record["status"] == "ok" else None,
            "gpu": record["machine"].get("gpu")}
    ranks: List[Optional[dict]] = [None] * ctx.world_size
    dist.all_gather_object(ranks, mine, group=ctx.control)
    worst = max(range(ctx.world_size), key=lambda r: (STATUS_ORDER[ranks[r]["status"]], -r))
    status = ranks[worst]["status"]
    merged = dict(record, status=status, error=None if status == "ok" else f"rank {worst}: {ranks[worst]['error']}",
                  wall_s=max(r["wall_s"] for r in ranks))
    merged.pop("traceback", None)
    merged["machine"] = dict(record["machine"], env={k: os.environ.get(k) for k in FORCED_ENV})
    if status == "error":
        merged["traceback"] = ranks[worst]["traceback"]
    peaks = [r["peak_bytes"] for r in ranks]
    merged["memory"] = {"peak_bytes": max((b for b in peaks if b is not None), default=None),
                        "peak_bytes_per_rank": peaks}
    if ctx.backend == "nccl":
        merged["machine"].update(gpus=[r["gpu"] for r in ranks], nccl=nccl_version())
    merged.pop("timing", None)
    merged.pop("throughput", None)
    if status == "ok":   # every rank has the same number of step times
        times = torch.tensor(record["timing"]["step"]["times_ms"], dtype=torch.float64)
        dist.all_reduce(times, op=dist.ReduceOp.MAX, group=ctx.control)
        timing = time_stats(times.tolist())
        timing["rank_mean_ms"] = [r["mean_ms"] for r in ranks]
        c = record["config"]
        merged["timing"] = {"step": timing}
        merged["throughput"] = {"tokens_per_s": c["global_batch"] * c["ctx"] / (timing["mean_ms"] / 1e3)}
    return merged


# ---------------------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------------------
COLUMNS = "  {:<7} {:<9} {:>16} {:>8} {:>10} {:>9} {:>12} {:>7}  {}"   # a header line replaces the first blank by #


def table_header(machine: dict, args, world_size: int = 1) -> str:
    where = f"cuda ({machine.get('gpu')}, {machine.get('gpu_memory_bytes', 0) / GIB:.1f} GiB)" \
        if args.device == "cuda" else f"cpu ({machine.get('cpu_threads')} threads)"
    batch = str(args.batch)
    if world_size > 1 and args.parallel == "fsdp2":
        param_dtype, _ = fsdp2_dtypes(args.mode)
        batch += (f" per rank x {world_size} ranks (FSDP2 fully_shard per block and root"
                  f"{', bf16 gathers, fp32 reduce-scatter' if param_dtype is not None else ''}"
                  f"; slowest rank's times, largest peak)")
    elif world_size > 1:
        batch += (f" per rank x {world_size} ranks (DDP, bucket {args.bucket_cap_mb:g} MB"
                  f"{', static graph' if args.ddp_static_graph else ''}; slowest rank's times, largest peak)")
    ckpt = "  checkpoint block" if args.checkpoint != "none" else ""
    return "\n".join([
        f"# torch_bench  device {where}  torch {machine['torch']}  batch {batch}  ctx {args.ctx or 'preset'}  "
        f"vocab {args.vocab or 'preset'}  warmup {args.warmup}  steps {args.steps}{ckpt}",
        "#" + COLUMNS.format("preset", "mode", "phase", "params", "mean", "± std", "tokens/s", "peak", "status")[1:],
        "#" + COLUMNS.format("", "", "", "(M)", "(ms)", "(ms)", "(tok/s)", "(GiB)", "")[1:],
    ])


def table_row(r: dict, note: str = "") -> str:
    """One line of the table; note (e.g. "compile reduce-overhead") goes before the status."""
    c = r["config"]
    note = f"{note}: " if note else ""
    params = f"{r['model']['params'] / 1e6:.1f}"
    peak = (r.get("memory") or {}).get("peak_bytes")
    peak_s = f"{peak / GIB:.2f}" if peak is not None else "-"
    if r["status"] == "ok":
        t = r["timing"]["step"]
        return COLUMNS.format(c["preset"], c["mode"], c["phase"], params, f"{t['mean_ms']:.2f}",
                              f"± {t['std_ms']:.2f}", f"{r['throughput']['tokens_per_s']:,.0f}", peak_s, note + "ok")
    status = {"oom": "OOM", "timeout": f"{r.get('error')}"}.get(r["status"], f"error: {r.get('error')}")
    return COLUMNS.format(c["preset"], c["mode"], c["phase"], params, "-", "", "-", peak_s, note + status)


def write_json(path: str, obj) -> None:
    """Writes to <path>.tmp, then renames, so no half-written file is left."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, p)


# ---------------------------------------------------------------------------------------------------------------------
# Sweep: one subprocess per configuration
# ---------------------------------------------------------------------------------------------------------------------
def child_args(args, preset: str, mode: str, phase: str, compile_mode: str, json_path: str) -> List[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--preset", preset, "--mode", mode, "--phase", phase,
           "--compile-mode", compile_mode,
           "--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--device", args.device, "--optimizer", args.optimizer, "--seed", str(args.seed),
           "--checkpoint", args.checkpoint, "--json", json_path, "--quiet"]
    for flag, value in (("--ctx", args.ctx), ("--vocab", args.vocab), ("--max-grad-norm", args.max_grad_norm)):
        if value is not None:
            cmd += [flag, str(value)]
    if args.forward_no_grad:
        cmd.append("--forward-no-grad")
    return cmd


def placeholder(args, preset: str, mode: str, phase: str, compile_mode: str, status: str, error: str) -> dict:
    """The record of a configuration that wrote none (skipped, timed out, or its subprocess died)."""
    cfg = preset_config(preset, args.vocab, args.ctx)
    return {"schema": SCHEMA, "status": status, "error": error,
            "config": {"preset": preset, "mode": mode, "phase": phase, "device": args.device, "batch": args.batch,
                       "ctx": cfg.context_length, "vocab": cfg.vocab_size, "checkpoint": args.checkpoint,
                       "compile_mode": compile_mode if mode in COMPILED_MODES else None},
            "model": {"params": sum(math.prod(s) for s in ref.param_shapes(cfg).values())}}


def run_child(args, preset: str, mode: str, phase: str, compile_mode: str, tmp: str) -> dict:
    """One configuration in a fresh subprocess of this script (an OOM, a compile cache or CUDA state cannot leak into
    the next) -> its record. After args.timeout seconds the subprocess and everything it started (its own session,
    torch.compile's workers included) are killed and the record is a placeholder with status "timeout"; a
    subprocess that wrote no record gives status "error" with the last lines of its output."""
    out = os.path.join(tmp, f"{preset}_{mode}_{phase}_{compile_mode}.json")
    proc = subprocess.Popen(child_args(args, preset, mode, phase, compile_mode, out), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return placeholder(args, preset, mode, phase, compile_mode, "timeout",
                           f"timeout after {args.timeout:g} s")
    if os.path.exists(out):
        return json.loads(Path(out).read_text())
    tail = (stderr or stdout).strip().splitlines()[-3:]
    return placeholder(args, preset, mode, phase, compile_mode, "error",
                       f"subprocess exited {proc.returncode}: {' | '.join(tail)}")


# ---------------------------------------------------------------------------------------------------------------------
# --compile-mode best: one subprocess per torch.compile mode, the fastest kept
# ---------------------------------------------------------------------------------------------------------------------
def best_of_compile_modes(run_mode: Callable[[str], dict], report: Callable[[str, dict], None] = lambda m, r: None,
                          modes: List[str] = BEST_COMPILE_MODES) -> dict:
    """Calls run_mode(compile_mode) -> record for each of modes in turn, report(compile_mode, record) after each.
    Returns a copy of the record with the smallest timing.step.mean_ms among those with status ok (the earlier mode
    on a tie), or of the first mode's record when none is ok (its status oom, error or timeout), with two fields added:
    compile_modes, one {mode, status, mean_ms, peak_bytes, wall_s, error} per mode in the order run (mean_ms None
    unless ok; peak_bytes None where not measured), and compile_mode_chosen (None when no mode is ok)."""
    records, tried = [], []
    for mode in modes:
        r = run_mode(mode)
        report(mode, r)
        records.append(r)
        tried.append({"mode": mode, "status": r["status"],
                      "mean_ms": r["timing"]["step"]["mean_ms"] if r["status"] == "ok" else None,
                      "peak_bytes": (r.get("memory") or {}).get("peak_bytes"), "wall_s": r.get("wall_s"),
                      "error": r.get("error")})
    ok = [i for i, t in enumerate(tried) if t["status"] == "ok"]
    chosen = min(ok, key=lambda i: tried[i]["mean_ms"]) if ok else 0
    return dict(records[chosen], compile_modes=tried, compile_mode_chosen=modes[chosen] if ok else None)


def best_line(record: dict) -> str:
    """The table's closing line for --compile-mode best: the fastest mode, then every mode's time or status."""
    each = ", ".join(f"{t['mode']} {t['mean_ms']:.2f} ms" if t["status"] == "ok" else f"{t['mode']} {t['status']}"
                     for t in record["compile_modes"])
    if record["compile_mode_chosen"] is None:
        return f"# no compile mode ran ({each})"
    return f"# fastest compile mode: {record['compile_mode_chosen']} ({each})"


def run_best(args, preset: str, mode: str, phase: str, tmp: str, quiet: bool = False) -> dict:
    """--compile-mode best for one configuration: each of BEST_COMPILE_MODES in run_child (args.timeout each), a
    table row per mode as it finishes and best_line at the end (unless quiet) -> best_of_compile_modes' record."""
    def report(compile_mode: str, r: dict) -> None:
        if not quiet:
            print(table_row(r, f"compile {compile_mode}"), flush=True)

    record = best_of_compile_modes(lambda m: run_child(args, preset, mode, phase, m, tmp), report)
    if not quiet:
        print(best_line(record), flush=True)
    return record


def sweep_modes(args) -> List[str]:
    """--modes, or by default every mode (cpu: the eager ones, as torch.compile needs CUDA here)."""
    return args.modes or ([m for m in MODES if m not in COMPILED_MODES] if args.device == "cpu" else MODES)


def sweep(args) -> int:
    presets = args.presets or (["tiny"] if args.device == "cpu" else SWEEP_PRESETS)
    modes = sweep_modes(args)
    phases = args.phases or PHASES
    machine = machine_info(args.device)
    print(table_header(machine, args), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="torch_bench_") as tmp:
        for preset in presets:
            for mode in modes:
                oom_phase = None
                best = args.compile_mode == "best" and mode in COMPILED_MODES
                for phase in sorted(phases, key=PHASES.index):
                    if oom_phase is not None:   # later phases need at least as much memory
                        row = placeholder(args, preset, mode, phase, args.compile_mode, "oom",
                                          f"skipped: phase {oom_phase} already ran out of memory")
                    elif best:
                        row = run_best(args, preset, mode, phase, tmp)
                    else:   # best: an eager mode runs once (it ignores the compile mode)
                        compile_mode = "default" if args.compile_mode == "best" else args.compile_mode
                        row = run_child(args, preset, mode, phase, compile_mode, tmp)
                    if row["status"] == "oom":
                        oom_phase = oom_phase or phase
                    rows.append(row)
                    if "compile_modes" not in row:   # (run_best printed its rows)
                        print(table_row(row), flush=True)
    if args.json:
        write_json(args.json, {"schema": "torch_bench.sweep/1", "machine": machine,
                               "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rows": rows})
        print(f"# wrote {args.json}")
    return 0 if all(r["status"] in ("ok", "oom") for r in rows) else 1


# ---------------------------------------------------------------------------------------------------------------------
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--preset", choices=list(PRESETS), default="small")
    ap.add_argument("--mode", choices=MODES, default="fp32")
    ap.add_argument("--phase", choices=PHASES, default="train_step")
    ap.add_argument("--compile-mode", choices=COMPILE_MODES + ["best"], default="default",
                    help="torch.compile mode for the compiled modes (default: default). best: the configuration "
                         f"once per mode ({', '.join(BEST_COMPILE_MODES)}), each in a fresh subprocess with "
                         "--timeout, and the fastest one's record (about three compiles' time)")
    ap.add_argument("--batch", type=int, default=4, help="rows per step, per rank under torchrun (default 4)")
    ap.add_argument("--ctx", type=int, default=None, help="tokens per row (default: preset's, 512; tiny 64)")
    ap.add_argument("--vocab", type=int, default=None, help="vocabulary (default: preset's, 10000; tiny 256)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (default 10)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when a GPU is visible")
    ap.add_argument("--optimizer", choices=["auto", "course", "torch", "fused"], default="auto",
                    help="auto: course for fp32, fused (cuda) or torch (cpu) for bf16/compiled")
    ap.add_argument("--max-grad-norm", type=float, default=None, help="clip grads in train_step (default: off)")
    ap.add_argument("--forward-no-grad", action="store_true", help="phase forward under torch.no_grad()")
    ap.add_argument("--checkpoint", choices=CHECKPOINTS, default="none",
                    help="block: activation checkpointing of every Transformer block (torch.utils.checkpoint, "
                         "non-reentrant); none (default) keeps all activations")
    ap.add_argument("--seed", type=int, default=0, help="init seed; data seed + rank (default 0)")
    ap.add_argument("--parallel", choices=PARALLELS, default="ddp",
                    help="torchrun: the data-parallel wrapping. ddp (default): DistributedDataParallel. fsdp2: "
                         "FSDP2's fully_shard on every block, then the root (PyTorch >= 2.4; bf16 and compiled: "
                         "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) over fp32 weights, autocast "
                         "kept; refused without torchrun). fsdp2 has not been run yet")
    ap.add_argument("--bucket-cap-mb", type=float, default=None,
                    help=f"torchrun, ddp: DDP gradient bucket size in MB (default {DEFAULT_BUCKET_CAP_MB:g}, "
                         "PyTorch's)")
    ap.add_argument("--ddp-static-graph", action="store_true", help="torchrun, ddp: DDP(static_graph=True)")
    ap.add_argument("--json", help="write the record (or, with --sweep, all records) here")
    ap.add_argument("--sweep", action="store_true", help="run presets x modes x phases, one subprocess each")
    ap.add_argument("--presets", nargs="+", choices=list(PRESETS), help="sweep: presets (default small..10B)")
    ap.add_argument("--modes", nargs="+", choices=MODES, help="sweep: modes (default all; cpu: eager ones)")
    ap.add_argument("--phases", nargs="+", choices=PHASES, help="sweep: phases (default all)")
    ap.add_argument("--timeout", type=float, default=1800,
                    help="sweep and --compile-mode best: seconds per configuration and compile mode (default 1800)")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compile_mode == "best":
        if not args.sweep and args.mode not in COMPILED_MODES:
            ap.error(f"--compile-mode best times torch.compile's modes: it needs --mode {' or '.join(COMPILED_MODES)} "
                     f"(not {args.mode})")
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            ap.error("--compile-mode best runs one subprocess per mode: start it with python, not torchrun")
    if args.timeout <= 0:
        ap.error("need --timeout > 0")
    if torch is None:
        ap.error(f"PyTorch is not available to {sys.executable} ({TORCH_IMPORT_ERROR})")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but no CUDA device is visible (use --device cpu)")
    if args.sweep and args.compile_mode == "best" and not set(sweep_modes(args)) & set(COMPILED_MODES):
        ap.error(f"--sweep --compile-mode best needs a compiled mode among --modes ({' or '.join(COMPILED_MODES)}; "
                 f"on {args.device} the default modes are {' '.join(sweep_modes(args))})")
    if args.warmup < 0 or args.steps < 1:
        ap.error("need --warmup >= 0 and --steps >= 1")
    if args.bucket_cap_mb is not None and args.bucket_cap_mb <= 0:
        ap.error("need --bucket-cap-mb > 0")
    if args.sweep and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        ap.error("--sweep runs in one process: start it with python, not torchrun")
    if args.parallel == "fsdp2":   # all before init_distributed: no process group is joined on a refusal
        if fsdp2_api() is None:
            ap.error(f"--parallel fsdp2 needs PyTorch >= {'.'.join(map(str, FSDP2_MIN_TORCH))} "
                     f"(torch.distributed.fsdp.fully_shard; in 2.4 and 2.5 torch.distributed._composable.fsdp); "
                     f"this is torch {torch.__version__}")
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            ap.error("--parallel fsdp2 shards over the ranks of a torchrun job: start it with torchrun "
                     "--nproc_per_node N, N >= 2 (one process runs the model unwrapped)")
        ddp_only = [f for f, given in (("--bucket-cap-mb", args.bucket_cap_mb is not None),
                                       ("--ddp-static-graph", args.ddp_static_graph)) if given]
        if ddp_only:
            ap.error(f"{' and '.join(ddp_only)}: DDP's options, not for --parallel fsdp2")
    elif args.bucket_cap_mb is None:
        args.bucket_cap_mb = DEFAULT_BUCKET_CAP_MB
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.sweep:
        return sweep(args)
    if args.compile_mode == "best":
        if not args.quiet:
            print(table_header(machine_info(args.device), args), flush=True)
        with tempfile.TemporaryDirectory(prefix="torch_bench_") as tmp:
            record = run_best(args, args.preset, args.mode, args.phase, tmp, args.quiet)
        if args.json:
            write_json(args.json, record)
        return 0 if record["status"] in ("ok", "oom") else 1
    ctx = init_distributed(args.device)
    try:
        record = run_one(args, ctx)
        if ctx is not None:
            record = merge_ranks(record, ctx)
        if ctx is None or ctx.rank == 0:
            if args.json:
                write_json(args.json, record)
            if not args.quiet:
                args.ctx, args.vocab = record["config"]["ctx"], record["config"]["vocab"]
                print(table_header(record["machine"], args, ctx.world_size if ctx is not None else 1))
                print(table_row(record))
                if record["status"] == "error":
                    print(record.get("traceback", ""), file=sys.stderr)
    finally:
        if ctx is not None:
            dist.destroy_process_group()
    return 0 if record["status"] in ("ok", "oom") else 1


if __name__ == "__main__":
    sys.exit(main())
