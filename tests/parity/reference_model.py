"""PyTorch reference of the CS336 "basics" Transformer LM and its training step (../shared/DESIGN.md, "model contract").

Written for this project as the independent reference that the C++ trainer is compared against (tests/parity) and
as the PyTorch peer of the GPU benchmarks (launch/torch_bench.py). One implementation serves both, so keep it plain:
autograd does the backward, nothing is fused.

Contract, in short (shapes use B rows, T positions):
  token_embeddings.weight [vocab, d_model]                  init trunc normal std 1, clipped at +-3
  layers.{i}.ln1.weight, ln2.weight [d_model]               RMSNorm, init ones
  layers.{i}.attn.{q,k,v,output}_proj.weight [d_model, d_model]
  layers.{i}.ffn.w1.weight, w3.weight [d_ff, d_model];  ffn.w2.weight [d_model, d_ff]
  ln_final.weight [d_model];  lm_head.weight [vocab, d_model]  (untied from the embeddings)
  Linear weights are [d_out, d_in], y = x W^T, init trunc normal std sqrt(2/(d_in+d_out)) clipped at +-3 std; no biases.
  Block: x = x + attn(ln1(x)); x = x + ffn(ln2(x)).  Loss: mean cross-entropy over all B*T tokens.

Works with torch 1.13 (Debian, CPU) in float64 and float32, and with torch 2.x on CUDA (bf16 autocast, SDPA,
torch.compile) for the benchmarks.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

RMSNORM_EPS = 1e-5        # DESIGN.md: RMSNorm eps
CLIP_EPS = 1e-6           # DESIGN.md: clip scale = min(1, max_norm / (norm + 1e-6)), as torch.nn.utils.clip_grad_norm_


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    context_length: int
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    rope_theta: float = 10000.0

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    def to_json(self) -> dict:
        """The `model` object of a trainer run config (explicit dims, no preset)."""
        return asdict(self)


def param_shapes(cfg: ModelConfig) -> Dict[str, tuple]:
    """Every parameter name of the contract with its shape, in model order (embedding, blocks, final norm, head)."""
    d, f = cfg.d_model, cfg.d_ff
    shapes = {"token_embeddings.weight": (cfg.vocab_size, d)}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        shapes[p + "ln1.weight"] = (d,)
        for name in ("q_proj", "k_proj", "v_proj", "output_proj"):
            shapes[p + f"attn.{name}.weight"] = (d, d)
        shapes[p + "ln2.weight"] = (d,)
        shapes[p + "ffn.w1.weight"] = (f, d)
        shapes[p + "ffn.w2.weight"] = (d, f)
        shapes[p + "ffn.w3.weight"] = (f, d)
    shapes["ln_final.weight"] = (d,)
    shapes["lm_head.weight"] = (cfg.vocab_size, d)
    return shapes


# ---------------------------------------------------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------------------------------------------------
def _trunc_normal_(w: torch.Tensor, std: float) -> torch.Tensor:
    return nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3.0 * std, b=3.0 * std)


class Linear(nn.Module):
    """y = x W^T with W [d_out, d_in]; no bias. Init trunc normal std sqrt(2/(d_in+d_out)), clipped at +-3 std."""

    def __init__(self, d_in: int, d_out: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in, device=device, dtype=dtype))
        _trunc_normal_(self.weight.data, math.sqrt(2.0 / (d_in + d_out)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)   # under autocast this is the bf16 matmul


class Embedding(nn.Module):
    """weight [vocab, d_model], init trunc normal std 1 clipped at +-3; rows gathered: [B, T] -> [B, T, d_model]."""

    def __init__(self, vocab_size: int, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model, device=device, dtype=dtype))
        _trunc_normal_(self.weight.data, 1.0)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.weight)   # = weight[tokens], with the faster embedding_dense_backward


class RMSNorm(nn.Module):
    """y = w * x / sqrt(mean(x^2) + 1e-5) over the last dim (Zhang & Sennrich 2019), computed in at least fp32
    (bf16 inputs are upcast, fp64 stays fp64) and cast back to the input dtype, as the course's RMSNorm does."""

    def __init__(self, d_model: int, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        in_dtype = x.dtype
        xf = x.to(torch.promote_types(in_dtype, torch.float32))
        rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + RMSNORM_EPS)
        return (self.weight * (xf * rstd)).to(in_dtype)


def rope_cos_sin(context_length: int, d_head: int, theta: float) -> tuple:
    """cos, sin [context_length, d_head/2] (fp64) of the angle p * theta^(-2i/d_head) for position p and pair i."""
    i = torch.arange(0, d_head // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / d_head)
    angle = torch.arange(context_length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angle), torch.sin(angle)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotates the pairs (2i, 2i+1) of the last dim of x [..., T, d_head] by the angles in cos/sin [T, d_head/2]
    (RoFormer, Su et al. 2021, eq. 34). The result keeps the pairs interleaved; the course's reference also
    interleaves them back, and any fixed permutation shared by Q and K leaves the scores unchanged."""
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    rot_even = x_even * cos - x_odd * sin
    rot_odd = x_even * sin + x_odd * cos
    return torch.stack((rot_even, rot_odd), dim=-1).flatten(-2)


def naive_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head) + causal mask) v with materialised scores; q, k, v [B, H, T, d_head].
    Query i sees keys j <= i."""
    T, d_head = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d_head)          # [B, H, T, T]
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs.to(v.dtype), v)


def sdpa_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same as naive_causal_attention through F.scaled_dot_product_attention (torch >= 2.0: flash/efficient
    kernels on CUDA). Its default scale is 1/sqrt(d_head)."""
    if not hasattr(F, "scaled_dot_product_attention"):
        raise RuntimeError(f"attention 'sdpa' needs torch >= 2.0 (this is torch {torch.__version__})")
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with RoPE on Q and K; x [B, T, d_model] -> [B, T, d_model]."""

    def __init__(self, cfg: ModelConfig, attention: str = "naive", device=None, dtype=None):
        super().__init__()
        d = cfg.d_model
        self.num_heads, self.d_head = cfg.num_heads, cfg.d_head
        self.q_proj = Linear(d, d, device, dtype)
        self.k_proj = Linear(d, d, device, dtype)
        self.v_proj = Linear(d, d, device, dtype)
        self.output_proj = Linear(d, d, device, dtype)
        self.attend = {"naive": naive_causal_attention, "sdpa": sdpa_causal_attention}[attention]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:                     # [B, T, d_model] -> [B, H, T, d_head]
            return y.view(B, T, self.num_heads, self.d_head).transpose(1, 2)

        q = apply_rope(heads(self.q_proj(x)), cos[:T], sin[:T])
        k = apply_rope(heads(self.k_proj(x)), cos[:T], sin[:T])
        v = heads(self.v_proj(x))
        if q.dtype != v.dtype:      # autocast: the projections are bf16, the rotation by fp32 cos/sin promoted q, k
            q, k = q.to(v.dtype), k.to(v.dtype)
        out = self.attend(q, k, v)                                        # [B, H, T, d_head]
        return self.output_proj(out.transpose(1, 2).reshape(B, T, -1))


class SwiGLU(nn.Module):
    """w2(silu(w1 x) * w3 x), silu(a) = a sigmoid(a) (Shazeer 2020); w1, w3 [d_ff, d_model], w2 [d_model, d_ff]."""

    def __init__(self, d_model: int, d_ff: int, device=None, dtype=None):
        super().__init__()
        self.w1 = Linear(d_model, d_ff, device, dtype)
        self.w2 = Linear(d_ff, d_model, device, dtype)
        self.w3 = Linear(d_model, d_ff, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class Block(nn.Module):
    """Pre-norm block: x = x + attn(ln1(x)); x = x + ffn(ln2(x))."""

    def __init__(self, cfg: ModelConfig, attention: str = "naive", device=None, dtype=None):
        super().__init__()
        self.ln1 = RMSNorm(cfg.d_model, device, dtype)
        self.attn = CausalSelfAttention(cfg, attention, device, dtype)
        self.ln2 = RMSNorm(cfg.d_model, device, dtype)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff, device, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cos, sin)
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    """tokens [B, T] int64 -> logits [B, T, vocab]. Parameter names are exactly the contract's (param_shapes()).

    attention: "naive" (materialised scores, any torch) or "sdpa" (torch >= 2.0). Parameters are created in `dtype`
    and initialised from torch's global RNG (seed it, or use init_params() for a seeded state dict).
    """

    def __init__(self, cfg: ModelConfig, attention: str = "naive", device=None, dtype=torch.float32):
        super().__init__()
        if cfg.d_model % cfg.num_heads != 0 or cfg.d_head % 2 != 0:
            raise ValueError(f"d_model {cfg.d_model} must split into {cfg.num_heads} heads of even size")
        self.cfg = cfg
        self.token_embeddings = Embedding(cfg.vocab_size, cfg.d_model, device, dtype)
        self.layers = nn.ModuleList(Block(cfg, attention, device, dtype) for _ in range(cfg.num_layers))
        self.ln_final = RMSNorm(cfg.d_model, device, dtype)
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, device, dtype)
        cos, sin = rope_cos_sin(cfg.context_length, cfg.d_head, cfg.rope_theta)
        # Not parameters and not in the state dict; computed in fp64, kept in the parameter dtype.
        self.register_buffer("rope_cos", cos.to(device=device, dtype=dtype), persistent=False)
        self.register_buffer("rope_sin", sin.to(device=device, dtype=dtype), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[-1] > self.cfg.context_length:
            raise ValueError(f"sequence length {tokens.shape[-1]} exceeds context_length {self.cfg.context_length}")
        x = self.token_embeddings(tokens)
        for block in self.layers:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.ln_final(x))


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of logits [..., vocab] (computed in at least fp32) against int64 targets [...]."""
    lf = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(lf.reshape(-1, lf.shape[-1]), targets.reshape(-1), reduction=reduction)


def init_params(cfg: ModelConfig, seed: int, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    """A seeded initial state dict (contract init), in model order; does not disturb the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TransformerLM(cfg, dtype=dtype)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def build_model(cfg: ModelConfig, params: Dict[str, torch.Tensor], dtype=torch.float64,
                attention: str = "naive") -> TransformerLM:
    """A model in `dtype` holding `params` (cast to dtype); every contract name must be present, and nothing else."""
    model = TransformerLM(cfg, attention=attention, dtype=dtype)
    model.load_state_dict({k: v.to(dtype) for k, v in params.items()}, strict=True)
    return model


# ---------------------------------------------------------------------------------------------------------------------
# Optimizer, clipping, schedule
# ---------------------------------------------------------------------------------------------------------------------
class AdamW(torch.optim.Optimizer):
    """The course's AdamW (DESIGN.md; Loshchilov & Hutter 2019, Alg. 2 with the bias corrections folded into the step).
    Per parameter, with t counted from 1:
        p -= lr * wd * p
        m  = b1 m + (1 - b1) g ;  v = b2 v + (1 - b2) g^2
        p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
    DESIGN.md applies the decay first (as torch.optim.AdamW does); the CS336 handout writes it after the Adam step.
    The two differ by lr * wd * (Adam update) <= lr^2 * wd per element and step, below the parity tolerances at
    these tests' lr (<= 3e-3) and wd (<= 0.1) over a few steps; it accumulates over steps (a fresh user measured
    4e-3 in the loss after 20 steps at lr 1e-2, wd 1), so the order is the contract's, not a rounding detail.
    Unlike torch.optim.AdamW, eps is added to sqrt(v), not to sqrt(v / (1 - b2^t)); with eps = 0 they agree.
    Weight decay is applied to every parameter (norm weights and embeddings too).

    storage=torch.bfloat16 is the trainer's precision bf16_pure: p, m and v hold bf16 values (bf16 tensors, or fp32
    tensors holding bf16 values when the model computes in fp32, as the trainer's CPU backend emulates it); each
    update is computed in fp32 from them and rounded once (to nearest even) into p, m and v."""

    def __init__(self, params: Iterable, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, storage: Optional[torch.dtype] = None):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.storage = storage

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["t"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["t"] += 1
                t, m, v, g = state["t"], state["m"], state["v"], p.grad
                if self.storage is not None:   # fp32 math on the stored values, one rounding per tensor
                    pf, mf, vf, gf = (x.to(torch.float32) for x in (p, m, v, g))
                else:
                    pf, mf, vf, gf = p, m, v, g
                pf.mul_(1.0 - lr * wd)
                mf.mul_(b1).add_(gf, alpha=1.0 - b1)
                vf.mul_(b2).addcmul_(gf, gf, value=1.0 - b2)
                alpha_t = lr * math.sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
                pf.addcdiv_(mf, vf.sqrt().add_(eps), value=-alpha_t)
                if self.storage is not None:
                    for dst, src in ((p, pf), (m, mf), (v, vf)):
                        dst.copy_(src.to(self.storage))
        return None


def global_grad_norm(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """sqrt(sum of g^2 over every gradient element), accumulated in at least fp32; a 0-dim tensor."""
    grads = [p.grad for p in params if p.grad is not None]
    acc = torch.promote_types(grads[0].dtype, torch.float32)
    return torch.sqrt(sum(g.to(acc).pow(2).sum() for g in grads))


def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: Optional[float]) -> float:
    """Returns the global grad norm before clipping; if max_norm is set, scales every grad in place by
    min(1, max_norm / (norm + 1e-6)) (DESIGN.md; the same rule as torch.nn.utils.clip_grad_norm_)."""
    params = list(params)
    norm = global_grad_norm(params)
    if max_norm is not None:
        scale = min(1.0, max_norm / (norm.item() + CLIP_EPS))
        if scale < 1.0:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(scale)
    return norm.item()


def lr_at(it: int, max_lr: float, schedule: str = "constant", warmup_steps: int = 0, cosine_steps: int = 0,
          min_lr: float = 0.0) -> float:
    """Learning rate of the 0-based step `it` (the course's get_lr_cosine_schedule):
    constant: max_lr.  cosine: max_lr * it / warmup for it < warmup; min_lr for it > cosine_steps;
    otherwise min_lr + 0.5 (1 + cos(pi (it - warmup) / (cosine_steps - warmup))) (max_lr - min_lr)."""
    if schedule == "constant":
        return max_lr
    if schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}")
    if it < warmup_steps:
        return max_lr * it / warmup_steps
    if it > cosine_steps:
        return min_lr
    progress = (it - warmup_steps) / (cosine_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)


# ---------------------------------------------------------------------------------------------------------------------
# Data and the training loop
# ---------------------------------------------------------------------------------------------------------------------
def sequential_batch(tokens: np.ndarray, step: int, batch_size: int, context_length: int):
    """The trainer's "sequential" sampling: row i of step s starts at o = ((s*B + i) * T) mod (n - T);
    inputs tok[o:o+T], targets tok[o+1:o+T+1]. Returns two int64 tensors [B, T]."""
    n, T = len(tokens), context_length
    if n <= T:
        raise ValueError(f"token file has {n} tokens, needs more than context_length {T}")
    offsets = [((step * batch_size + i) * T) % (n - T) for i in range(batch_size)]
    x = np.stack([tokens[o:o + T] for o in offsets]).astype(np.int64)
    y = np.stack([tokens[o + 1:o + T + 1] for o in offsets]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


@dataclass
class OptimConfig:
    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    max_grad_norm: Optional[float] = None
    schedule: str = "constant"
    warmup_steps: int = 0
    cosine_steps: int = 0
    min_lr: float = 0.0

    def to_json(self) -> dict:
        d = asdict(self)
        d["betas"] = list(self.betas)
        return d


@dataclass
class RunResult:
    losses: List[float]                 # mean loss of each step, from that step's forward pass (before the update)
    grad_norms: List[float]             # global grad norm before clipping (train steps only)
    lrs: List[float]                    # learning rate used by each step (train steps only)
    params: Dict[str, torch.Tensor]     # parameters after the run, in the run's dtype


def run_reference(cfg: ModelConfig, init: Dict[str, torch.Tensor], tokens: np.ndarray, steps: int,
                  opt: OptimConfig, batch_size: int, microbatch_size: int = 0, phase: str = "train_step",
                  dtype=torch.float64) -> RunResult:
    """Runs `steps` steps of the trainer's loop in PyTorch, in `dtype`, from the state dict `init`.

    phase "train_step": forward, backward (accumulated over microbatches of microbatch_size rows; 0 = the whole
    batch; each microbatch's summed token loss is divided by B*T so the grads are those of the full-batch mean),
    clip, AdamW at lr_at(step). phase "forward": the loss only, parameters unchanged."""
    model = build_model(cfg, init, dtype=dtype)
    params = list(model.parameters())
    optimizer = AdamW(params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay)
    mb = microbatch_size or batch_size
    if batch_size % mb != 0:
        raise ValueError(f"microbatch_size {mb} does not divide batch_size {batch_size}")
    result = RunResult([], [], [], {})
    for step in range(steps):
        x, y = sequential_batch(tokens, step, batch_size, cfg.context_length)
        if phase == "forward":
            with torch.no_grad():
                result.losses.append(cross_entropy(model(x), y).item())
            continue
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for r in range(0, batch_size, mb):
            loss_sum = cross_entropy(model(x[r:r + mb]), y[r:r + mb], reduction="sum")
            (loss_sum / y.numel()).backward()
            total += loss_sum.item()
        result.losses.append(total / y.numel())
        result.grad_norms.append(clip_grad_norm(params, opt.max_grad_norm))
        lr = lr_at(step, opt.lr, opt.schedule, opt.warmup_steps, opt.cosine_steps or steps, opt.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        result.lrs.append(lr)
        optimizer.step()
    result.params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return result


def run_reference_bf16_pure(cfg: ModelConfig, init: Dict[str, torch.Tensor], tokens: np.ndarray, steps: int,
                            opt: OptimConfig, batch_size: int, compute=torch.float32, device: str = "cpu",
                            attention: str = "naive") -> RunResult:
    """The trainer's precision bf16_pure in PyTorch: weights, gradients and AdamW m, v hold bf16 values, the update is
    computed in fp32 and rounded once (AdamW(storage=bf16)). compute=torch.float32: the model computes in fp32 on the
    bf16 values and each gradient is rounded to bf16 once after the backward (the trainer's CPU backend);
    compute=torch.bfloat16: the model is built in bf16, as the 8B leaderboard's reference (the trainer on CUDA).
    One microbatch per step, no clipping (opt.max_grad_norm must be None)."""
    if opt.max_grad_norm is not None:
        raise ValueError("run_reference_bf16_pure: no clipping")
    rounded = {k: v.to(torch.bfloat16) for k, v in init.items()}
    model = build_model(cfg, rounded, dtype=compute, attention=attention).to(device)
    params = list(model.parameters())
    optimizer = AdamW(params, lr=opt.lr, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay,
                      storage=torch.bfloat16)
    result = RunResult([], [], [], {})
    for step in range(steps):
        x, y = (t.to(device) for t in sequential_batch(tokens, step, batch_size, cfg.context_length))
        optimizer.zero_grad(set_to_none=True)
        loss_sum = cross_entropy(model(x), y, reduction="sum")
        (loss_sum / y.numel()).backward()
        with torch.no_grad():
            for p in params:
                p.grad.copy_(p.grad.to(torch.bfloat16))
        result.losses.append(loss_sum.item() / y.numel())
        result.grad_norms.append(clip_grad_norm(params, None))
        lr = lr_at(step, opt.lr, opt.schedule, opt.warmup_steps, opt.cosine_steps or steps, opt.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        result.lrs.append(lr)
        optimizer.step()
    result.params = {name: p.detach().float().cpu().clone() for name, p in model.named_parameters()}
    return result
