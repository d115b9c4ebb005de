#!/usr/bin/env python3
"""Why the bench's forward + backward in sequence (fwdbwd) takes 0.4-0.8 ms more than its forward and backward timed
apart on H100s (0.13-0.15 on the H200, v34): each segment timed by events inside the sequence, pairs of one pass,
and the sequence with an idle gap (torch.cuda._sleep) between the passes; SDPA's the same way. 16 heads, T 16384,
causal, d 64 and 128. Usage: seqprobe.py LIB"""
import ctypes, math, os, sys
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


def timed(segs, reps=20, warm=3):
    """segs: list of callables run back to back; median ms of each segment and of the whole, over reps."""
    for _ in range(warm):
        for s in segs:
            s()
    torch.cuda.synchronize()
    per = [[] for _ in segs] + [[]]
    for _ in range(reps):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(segs) + 1)]
        ev[0].record()
        for i, s in enumerate(segs):
            s()
            ev[i + 1].record()
        ev[-1].synchronize()
        for i in range(len(segs)):
            per[i].append(ev[i].elapsed_time(ev[i + 1]))
        per[-1].append(ev[0].elapsed_time(ev[-1]))
    med = lambda x: sorted(x)[len(x) // 2]
    return [round(med(x), 3) for x in per]


for d in (64, 128):
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
    gap = lambda: torch.cuda._sleep(2_000_000)  # ~1 ms at ~2 GHz
    print(f"d {d}: ours")
    print("  fwd alone", timed([fw]), " bwd alone", timed([bw]))
    print("  fwd, bwd in sequence", timed([fw, bw]))
    print("  fwd, fwd", timed([fw, fw]), " bwd, bwd", timed([bw, bw]))
    print("  fwd, idle ~1 ms, bwd", timed([fw, gap, bw]))
    print("  bwd, fwd", timed([bw, fw]))
    q, k, v = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)
    holder = {}

    def sf():
        holder["o"] = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def sb():
        torch.autograd.grad(holder["o"], (q, k, v), do)

    def sfn():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
    print(f"d {d}: SDPA")
    print("  fwd alone (no grad)", timed([sfn]), " fwd, bwd in sequence", timed([sf, sb]))
    print("  fwd, idle ~1 ms, bwd", timed([sf, gap, sb]))
    del q, k, v, do, holder, qkv, dout, out, lse, dqkv, ws
    torch.cuda.empty_cache()
