#!/usr/bin/env python3
"""SDPA's d 64 / 128 forward + backward (16 heads, T 16384, causal) under torch.profiler: GPU kernel time against
the wall time per call, and which backend's kernels run. Usage: sdpaprof.py"""
import time
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity

dev = torch.device("cuda")
for d in (64, 128):
    B, T, H = 1, 16384, 16
    q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)

    def fb():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(o, (q, k, v), do)
    for _ in range(5):
        fb()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        fb()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 10 * 1e3
    t0 = time.perf_counter()
    for _ in range(10):
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(o, (q, k, v), do)
    cpu_only = (time.perf_counter() - t0) / 10 * 1e3  # host time to issue (no sync inside unless the op syncs)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fb()
        torch.cuda.synchronize()
    print(f"d {d}: wall {wall:.3f} ms a call (synced after 10), host issue time {cpu_only:.3f} ms a call")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=70))
