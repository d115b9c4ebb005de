#!/usr/bin/env python3
"""d 64 / 128 forward + backward, ours against SDPA's, under three conditions: (a) sustained: each alone back to back
for 2 s, then 20 timed calls; (b) rested: each after 300 ms of idle GPU, 5 timed calls, alternating, 8 times;
(c) paired: in turn (5 + 5 calls), order swapped every round, 8 rounds. Usage: fairprobe.py LIB"""
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


for d in (64, 128):
    B, T, H = 1, 16384, 16
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
    out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
    dqkv = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
    ws = torch.empty(lib.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
    sc = 1.0 / math.sqrt(d)

    def ours():
        lib.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, 1, 1, 0, sc, st())
        lib.fa_bwd(0, dqkv.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0, lse.data_ptr(),
                   ws.data_ptr(), B, T, H, d, 1, 1, sc, st())
    q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)

    def sdpa():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.autograd.grad(o, (q, k, v), do)
    fns = {"ours": ours, "sdpa": sdpa}
    res = {}
    for fn in fns.values():  # first calls (cuDNN builds SDPA's graphs: seconds of host time) before any timing
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for name, fn in fns.items():  # (a) sustained
        t0 = time.time()
        while time.time() - t0 < 2.0:
            fn()
            torch.cuda.synchronize()
        res[("sustained", name)] = med(times(fn, 20))
    rest = {n: [] for n in fns}  # (b) rested
    for r in range(8):
        for name in (("ours", "sdpa") if r % 2 == 0 else ("sdpa", "ours")):
            torch.cuda.synchronize()
            time.sleep(0.3)
            rest[name] += times(fns[name], 5)
    for n in fns:
        res[("rested", n)] = med(rest[n])
    pair = {n: [] for n in fns}  # (c) paired
    for r in range(8):
        for name in (("ours", "sdpa") if r % 2 == 0 else ("sdpa", "ours")):
            pair[name].append(med(times(fns[name], 5)))
    for n in fns:
        res[("paired", n)] = med(pair[n])
    for cond in ("sustained", "rested", "paired"):
        a, b = res[(cond, "ours")], res[(cond, "sdpa")]
        print(f"d {d} {cond:9s}: ours {a:.3f} ms, SDPA {b:.3f} ms, ratio {a / b:.3f}", flush=True)
    del qkv, dout, out, lse, dqkv, ws, q, k, v, do
    torch.cuda.empty_cache()
