"""Shared pieces of the flash bench scripts (bench.py, sm90_check.py): the float64 PyTorch reference, the relative
error and the CUDA-event timer."""
import ctypes
import math

import torch


def stream():
    """The current PyTorch CUDA stream, for the library's entry points."""
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def reference(qkv, dout, B, T, H, d, causal):
    """Attention of qkv [B*T, 3D] (q, k, v of H heads of d) in float64, with autograd for dout [B*T, D]:
    O [B*T, D], L [B, H, T] (natural-log logsumexp), dqkv [B*T, 3D]."""
    x = qkv.double().detach().requires_grad_()
    v5 = x.view(B, T, 3, H, d)
    q, k, v = (v5[:, :, i].permute(0, 2, 1, 3) for i in range(3))
    S = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        S = S.masked_fill(torch.ones(T, T, dtype=torch.bool, device=qkv.device).triu(1), float("-inf"))
    L = torch.logsumexp(S, -1)
    P = torch.exp(S - L[..., None])
    O = (P @ v).permute(0, 2, 1, 3).reshape(B * T, H * d)
    O.backward(dout.double())
    return O.detach(), L.detach(), x.grad.detach()


def rel(got, ref):
    """||got - ref|| / ||ref|| (NaN when got holds a NaN)."""
    got = got.double()
    if torch.isnan(got).any():
        return float("nan")
    n = ref.norm().item()
    return (got - ref).norm().item() / (n if n > 0 else 1.0)


def median_ms(fn, reps=20, warmup=3, inner=1):
    """Median of reps CUDA-event timings, each of inner back-to-back calls, per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / inner)
    ts.sort()
    return ts[len(ts) // 2]
