#!/usr/bin/env python3
"""d 64 (16 heads, T 16384, causal): each pass alone, sustained (2 s back to back, then 20 timed calls) and rested
(300 ms idle before 5 timed calls, 6 times): our forward, our backward, SDPA's forward (no grad) and SDPA's backward
(autograd on a retained graph). Usage: passprobe.py LIB"""
import ctypes, math, os, sys, time
import torch
import torch.nn.functional as F

lib = ctypes.CDLL(os.path.abspath(sys.argv[1]))
ci, vp, cf = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
lib.fa_fwd.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, ci, cf, vp]
lib.fa_bwd_ws.argtypes = [ci, ci, ci, ci, ci, ci]
lib.fa_bwd_ws.restype = ctypes.c_size_t
lib.fa_bwd.argtypes = [ci, vp, ci, vp, vp, vp, ci, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]
dev = torch.device("cuda")
st = lambda: ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
med = lambda x: sorted(x)[len(x) // 2]


def times(fn, n):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    ev[0].record()
    for i in range(n):
        fn()
        ev[i + 1].record()
    ev[-1].synchronize()
    return [ev[i].elapsed_time(ev[i + 1]) for i in range(n)]


for d in (64,):
    B, T, H = 1, 16384, 16
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
    out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
    dqkv = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
    ws = torch.empty(lib.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
    sc = 1.0 / math.sqrt(d)
    fw = lambda: lib.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, 1, 1, 0, sc, st())
    bw = lambda: lib.fa_bwd(0, dqkv.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0,
                            lse.data_ptr(), ws.data_ptr(), B, T, H, d, 1, 1, sc, st())
    fw()
    q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def sf():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def sb():
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    for name, fn in (("ours fwd", fw), ("ours bwd", bw), ("sdpa fwd", sf), ("sdpa bwd", sb)):
        for _ in range(3):  # first calls (cuDNN builds SDPA's graphs: seconds of host time) before any timing
            fn()
        torch.cuda.synchronize()
        t0 = time.time()
        while time.time() - t0 < 2.0:
            fn()
            torch.cuda.synchronize()
        s = med(times(fn, 20))
        r = []
        for _ in range(6):
            torch.cuda.synchronize()
            time.sleep(0.3)
            r += times(fn, 5)
        print(f"d {d} {name}: sustained {s:.3f} ms, rested {med(r):.3f} ms", flush=True)
