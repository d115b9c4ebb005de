#!/usr/bin/env python3
"""GPU check and timing of the Hopper (sm_90a, wgmma) FlashAttention variants of launch/flash_bench/sm90_capi.cu.

  python3 launch/flash_bench/sm90_check.py [--fwd 0,1,10] [--bwd ...] [--out DIR] [--no-check] [--no-time]
                                           [--rounds N] [--xl] [--profile [--profile-d D]]

Checks each variant, and the production backward of --prod (flash_api's path: its workspace, NaN-poisoned, its
passes and dispatch), against attention in float64 (PyTorch, same rounded inputs; fresh random inputs per case,
outputs NaN-poisoned): O and L relative error < 1e-2 (bf16), dQ/dK/dV < 2e-2, at T 1, 17, 100, 128, 1000, 4097 (one
(batch, head) pair) and 2 x 20 heads up to T 1000, causal and not, d 64, 80, 96, 128. Then times them at 1 x 16
heads, T 16384, causal (d 64, 80, 96 and 128; --xl: d 80 at 4 x 32 heads, T 512, 2048, 16384; --d96: d 96 at 4 x 32
heads, T 512, 2048, 16384), beside the production kernels (libflashbench.so, when built; at d 80 also its mma.sync
kernels, variants 21, at d 96 variants 50) and SDPA in the same process: median
of CUDA-event timings. Forward variants of one head dimension are also compared bit for bit with the first of them
listed (O and L; the overlap / ping-pong loops must give the same bits as the plain one; a difference is a failure,
except for variants with another key tile). --rounds N times the
kernels in turn, N rounds after a warm-up (sustained clocks; median and spread per kernel; the production forward,
the --fwd variants and SDPA's forward, and with --bwd variants the production backward, those and SDPA's forward +
backward; at the shapes above, --xl / --d96's and --shapes), instead of the checks and the table above; in one
burst the kernel timed first gains up to ~7% from the clocks, so compare variants by rounds. Writes sm90_check.json (sm90_rounds.json) under --out and prints a table last.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time


p = argparse.ArgumentParser()
p.add_argument("--lib", default=".carry/flash/libflashbench.so")
p.add_argument("--prod", default=".carry/flash/libflashbench.so")
p.add_argument("--fwd", default="9,18,24,34", help="fa_fwd_sm90 variants (sm90_capi.cu); 9, 18, 24, 34: the "
               "production configurations (d 64, 128, 80, 96); 6, 16: d 64, 128 with every rescale of O; 0, 13, 20, "
               "32: one CTA a query tile")
p.add_argument("--bwd", default="7,10,20,31", help="fa_bwd_sm90 variants; 7, 10, 20, 31: the production "
               "configurations")
p.add_argument("--xl", action="store_true", help="also time d 80 at the xl shapes (4 x 32 heads, T 512, 2048, 16384)")
p.add_argument("--d96", action="store_true", help="also time d 96 at 4 x 32 heads, T 512, 2048, 16384 (with --rounds: "
               "and at 1 x 16 heads, T 16384)")
p.add_argument("--shapes", default="", help="also time these causal shapes, BxTxHxd comma-separated (e.g. 4x512x12x64: "
               "the small model's attention)")
p.add_argument("--out", default=os.environ.get("OUT", "."))
p.add_argument("--no-check", action="store_true")
p.add_argument("--no-time", action="store_true")
p.add_argument("--rounds", type=int, default=0, help="time the production kernels, every --fwd / --bwd variant "
               "and SDPA's in turn, this many rounds (median of 5 calls each), after a 1 s warm-up; reports the median "
               "round and the spread (robust to clock drift between variants); --bwd '' for the forward only")
p.add_argument("--profile-d", type=int, default=64, help="head dimension of --profile (16 heads, T 16384)")
p.add_argument("--profile", action="store_true", help="one call of each --fwd / --bwd variant at 16 x 64, T 16384 "
               "(for a profiler), nothing else")
args = p.parse_args()

# After the arguments, so that --help works without PyTorch.
try:
    import torch
    import torch.nn.functional as F

    from torch_ref import median_ms, reference, rel, stream
except ImportError as e:
    p.error(f"needs PyTorch with CUDA, not importable by {sys.executable} ({e}); Debian: apt install "
            "python3-torch (CPU only), or a CUDA build: pip install torch")

ci, vp, cf = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
lib = ctypes.CDLL(os.path.abspath(args.lib))
lib.fa_fwd_sm90.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]
lib.fa_fwd_sm90.restype = ci
lib.fa_bwd_sm90.argtypes = [ci, vp, vp, vp, vp, vp, vp, ci, ci, ci, ci, ci, cf, vp]
lib.fa_bwd_sm90.restype = ci
prod = None
if os.path.exists(args.prod):
    prod = ctypes.CDLL(os.path.abspath(args.prod))
    prod.fa_fwd.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, ci, cf, vp]
    prod.fa_bwd_ws.argtypes = [ci, ci, ci, ci, ci, ci]
    prod.fa_bwd_ws.restype = ctypes.c_size_t
    prod.fa_bwd.argtypes = [ci, vp, ci, vp, vp, vp, ci, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]

dev = torch.device("cuda")
FWD = [int(x) for x in args.fwd.split(",") if x]
# Forward variants whose key tile (the online softmax's steps) differs from production's: their bits may differ, so
# they are not compared bit for bit (sm90_capi.cu: 11 takes 64 keys per tile).
OTHER_KEY_TILE = {11}
BWD = [int(x) for x in args.bwd.split(",") if x]
res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": [], "timing": []}
failures = []


def fwd(v, qkv, B, T, H, d, causal, out=None, lse=None):
    out = torch.full((B * T, H * d), float("nan"), device=dev, dtype=torch.bfloat16) if out is None else out
    lse = torch.full((B, H, T), float("nan"), device=dev, dtype=torch.float32) if lse is None else lse
    rc = lib.fa_fwd_sm90(v, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, int(causal), 0,
                         1.0 / math.sqrt(d), stream())
    return rc, out, lse


def bwd(v, qkv, out, lse, dout, B, T, H, d, causal, dqkv=None, ws=None):
    dqkv = torch.full((B * T, 3 * H * d), float("nan"), device=dev, dtype=torch.bfloat16) if dqkv is None else dqkv
    ws = torch.empty(B * H * T * (d + 1) + 64, device=dev, dtype=torch.float32) if ws is None else ws
    rc = lib.fa_bwd_sm90(v, dqkv.data_ptr(), dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), lse.data_ptr(),
                         ws.data_ptr(), B, T, H, d, int(causal), 1.0 / math.sqrt(d), stream())
    return rc, dqkv


def check(d, causal, T, B, H):
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
    O, L, G = reference(qkv, dout, B, T, H, d, causal)
    D = H * d
    first = None  # the first variant's O and L that ran at this shape: the others' bits are compared with them
    for v in FWD:
        rc, out, lse = fwd(v, qkv, B, T, H, d, causal)
        if rc == -2:
            continue
        torch.cuda.synchronize()
        e = {"pass": "fwd", "variant": v, "d": d, "causal": causal, "T": T, "BH": B * H, "rc": rc,
             "O": rel(out, O), "L": rel(lse, L)}
        if first is None:
            first = (v, out, lse)
        elif v not in OTHER_KEY_TILE:
            e["same_bits_as"] = first[0]
            e["same_bits"] = bool(torch.equal(out, first[1]) and torch.equal(lse, first[2]))
        ok = rc == 0 and e["O"] < 1e-2 and e["L"] < 1e-2 and e.get("same_bits", True)
        res["checks"].append(e)
        if not ok:
            failures.append(e)
    def check_bwd(variant, rc, dqkv):
        """One backward case: dQ, dK, dV against the float64 reference (< 2e-2)."""
        torch.cuda.synchronize()
        e = {"pass": "bwd", "variant": variant, "d": d, "causal": causal, "T": T, "BH": B * H, "rc": rc,
             "dQ": rel(dqkv[:, :D], G[:, :D]), "dK": rel(dqkv[:, D:2 * D], G[:, D:2 * D]),
             "dV": rel(dqkv[:, 2 * D:], G[:, 2 * D:])}
        res["checks"].append(e)
        if not (rc == 0 and max(e["dQ"], e["dK"], e["dV"]) < 2e-2):
            failures.append(e)

    o16, l32 = O.to(torch.bfloat16), L.float().contiguous()
    for v in BWD:
        rc, dqkv = bwd(v, qkv, o16, l32, dout, B, T, H, d, causal)
        if rc != -2:
            check_bwd(v, rc, dqkv)
    if prod is not None:  # the production backward (capi.cu fa_bwd 0: flash_api's workspace, passes and dispatch)
        dqkv = torch.full((B * T, 3 * D), float("nan"), device=dev, dtype=torch.bfloat16)
        # NaN-poisoned: the passes must write whatever they read (dq_accum's tiles are stored, not zeroed and added)
        ws = torch.full((prod.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64,), float("nan"), device=dev, dtype=torch.float32)
        rc = prod.fa_bwd(0, dqkv.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), o16.data_ptr(), 0, l32.data_ptr(),
                         ws.data_ptr(), B, T, H, d, int(causal), 1, 1.0 / math.sqrt(d), stream())
        check_bwd("prod", rc, dqkv)

def time_shape(B, T, H, d, causal):
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
    fl = 2.0 * T * T * d * B * H * (1 if causal else 2)
    rows = []
    out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
    sc = 1.0 / math.sqrt(d)
    if prod is not None:
        ms = median_ms(lambda: prod.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, int(causal),
                                           1, 0, sc, stream()))
        rows.append(("fwd", "prod", ms, fl / ms / 1e9))
        ws = torch.empty(prod.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
        dq = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
        ms = median_ms(lambda: prod.fa_bwd(0, dq.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0,
                                           lse.data_ptr(), ws.data_ptr(), B, T, H, d, int(causal), 1, sc, stream()))
        rows.append(("bwd", "prod", ms, 2.5 * fl / ms / 1e9))
        # the mma.sync kernels that ran d 80 before the Hopper kernels took it (capi.cu variants 21) and that run d 96
        # off Hopper (variants 50)
        mv = {80: 21, 96: 50}.get(d)
        if mv is not None:
            ms = median_ms(lambda: prod.fa_fwd(mv, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d,
                                               int(causal), 1, 0, sc, stream()))
            rows.append(("fwd", "mma.sync", ms, fl / ms / 1e9))
            ms = median_ms(lambda: prod.fa_bwd(mv, dq.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(),
                                               0, lse.data_ptr(), ws.data_ptr(), B, T, H, d, int(causal), 1, sc,
                                               stream()))
            rows.append(("bwd", "mma.sync", ms, 2.5 * fl / ms / 1e9))
    for v in FWD:
        if fwd(v, qkv, B, T, H, d, causal, out, lse)[0] != 0:
            continue
        ms = median_ms(lambda: fwd(v, qkv, B, T, H, d, causal, out, lse))
        rows.append(("fwd", f"sm90 v{v}", ms, fl / ms / 1e9))
    fwd(FWD[0] if FWD else 0, qkv, B, T, H, d, causal, out, lse)
    dq = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
    ws = torch.empty(B * H * T * (d + 1) + 64, device=dev, dtype=torch.float32)
    for v in BWD:
        if bwd(v, qkv, out, lse, dout, B, T, H, d, causal, dq, ws)[0] != 0:
            continue
        ms = median_ms(lambda: bwd(v, qkv, out, lse, dout, B, T, H, d, causal, dq, ws))
        rows.append(("bwd", f"sm90 v{v}", ms, 2.5 * fl / ms / 1e9))
    q, k, v_ = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)
    with torch.no_grad():
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v_, is_causal=causal))
    rows.append(("fwd", "sdpa", ms, fl / ms / 1e9))

    def fb():
        o = F.scaled_dot_product_attention(q, k, v_, is_causal=causal)
        torch.autograd.grad(o, (q, k, v_), do)
    ms = median_ms(fb)
    rows.append(("f+b", "sdpa", ms, 3.5 * fl / ms / 1e9))
    for r in rows:
        res["timing"].append({"shape": f"{B}x{H}x{d} T{T} {'causal' if causal else 'full'}", "pass": r[0],
                              "kernel": r[1], "ms": r[2], "tflops": r[3]})


def time_rounds(B, T, H, d, causal, rounds):
    """The kernels of this shape timed in turn, `rounds` times (median of 5 calls each): the production forward,
    every --fwd variant and SDPA's forward; with --bwd variants also the production backward, those variants and
    SDPA's forward + backward. Appends each kernel's median round and its rounds to res["timing"]."""
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
    sc = 1.0 / math.sqrt(d)
    fns = {}  # (pass, kernel) -> callable
    if prod is not None:
        fns[("fwd", "prod")] = lambda: prod.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d,
                                                   int(causal), 1, 0, sc, stream())
    for v in FWD:
        if fwd(v, qkv, B, T, H, d, causal, out, lse)[0] == 0:
            fns[("fwd", f"sm90 v{v}")] = (lambda v=v: fwd(v, qkv, B, T, H, d, causal, out, lse))
    q, k, v_ = (torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16, requires_grad=bool(BWD)) for _ in range(3))
    with torch.no_grad():
        fns[("fwd", "sdpa")] = lambda: F.scaled_dot_product_attention(q, k, v_, is_causal=causal)
    if BWD:
        fwd(FWD[0] if FWD else {64: 6, 80: 24, 96: 34, 128: 16}[d], qkv, B, T, H, d, causal, out, lse)
        dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
        dq = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
        ws = torch.empty(B * H * T * (d + 1) + 64, device=dev, dtype=torch.float32)
        if prod is not None:
            pws = torch.empty(prod.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
            fns[("bwd", "prod")] = lambda: prod.fa_bwd(0, dq.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(),
                                                       out.data_ptr(), 0, lse.data_ptr(), pws.data_ptr(), B, T, H, d,
                                                       int(causal), 1, sc, stream())
        for v in BWD:
            if bwd(v, qkv, out, lse, dout, B, T, H, d, causal, dq, ws)[0] == 0:
                fns[("bwd", f"sm90 v{v}")] = (lambda v=v: bwd(v, qkv, out, lse, dout, B, T, H, d, causal, dq, ws))
        do = torch.randn(B, H, T, d, device=dev, dtype=torch.bfloat16)

        def fb():
            o = F.scaled_dot_product_attention(q, k, v_, is_causal=causal)
            torch.autograd.grad(o, (q, k, v_), do)
        fns[("f+b", "sdpa")] = fb
    t0 = time.time()
    while time.time() - t0 < 1.0:  # clocks up before the first round
        for f in fns.values():
            f()
        torch.cuda.synchronize()
    times = {key: [] for key in fns}
    for _ in range(rounds):
        for key, f in fns.items():
            times[key].append(median_ms(f, reps=5, warmup=1))
    fl = 2.0 * T * T * d * B * H * (1 if causal else 2)
    shape = f"{B}x{H}x{d} T{T} {'causal' if causal else 'full'}"
    for (pass_, name), ts in times.items():
        s_ = sorted(ts)
        med = s_[len(s_) // 2]
        fl_pass = fl * {"fwd": 1.0, "bwd": 2.5, "f+b": 3.5}[pass_]
        res["timing"].append({"shape": shape, "pass": pass_, "kernel": name, "ms": med, "tflops": fl_pass / med / 1e9,
                              "rounds_ms": ts})


if args.rounds > 0:
    for (B, T, H, d) in [(1, 16384, 16, 64), (1, 16384, 16, 128), (1, 16384, 16, 80)] + \
            ([(4, 512, 32, 80), (4, 2048, 32, 80), (4, 16384, 32, 80)] if args.xl else []) + \
            ([(1, 16384, 16, 96), (4, 512, 32, 96), (4, 2048, 32, 96), (4, 16384, 32, 96)] if args.d96 else []) + \
            [tuple(int(x) for x in sh.split("x")) for sh in args.shapes.split(",") if sh]:
        time_rounds(B, T, H, d, True, args.rounds)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "sm90_rounds.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(f"{'shape':26} {'pass':5} {'kernel':10} {'median ms':>9} {'TFLOP/s':>8} {'min':>7} {'max':>7}  "
          f"({args.rounds} rounds)")
    for t in res["timing"]:
        print(f"{t['shape']:26} {t['pass']:5} {t['kernel']:10} {t['ms']:9.3f} {t['tflops']:8.1f} "
              f"{min(t['rounds_ms']):7.3f} {max(t['rounds_ms']):7.3f}")
    raise SystemExit(0)
if args.profile:
    B, T, H, d = 1, 16384, 16, args.profile_d
    qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
    dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
    for v in FWD or [{64: 6, 80: 24, 96: 34, 128: 16}[d]]:  # (the backward needs O and L of some forward)
        rc, out, lse = fwd(v, qkv, B, T, H, d, True)
    for v in BWD:
        bwd(v, qkv, out, lse, dout, B, T, H, d, True)
    torch.cuda.synchronize()
    raise SystemExit(0)
if not args.no_check:
    for d in (64, 80, 96, 128):
        for causal in (True, False):
            for T in (1, 17, 100, 128, 1000, 4097):
                check(d, causal, T, 1, 1)
            for T in (17, 128, 1000):
                check(d, causal, T, 2, 20)
if not args.no_time:
    time_shape(1, 16384, 16, 64, True)
    time_shape(1, 16384, 16, 128, True)
    time_shape(1, 16384, 16, 80, True)
    time_shape(1, 16384, 16, 96, True)
    if args.xl:
        for T in (512, 2048, 16384):
            time_shape(4, T, 32, 80, True)
    if args.d96:
        for T in (512, 2048, 16384):
            time_shape(4, T, 32, 96, True)
    for sh in filter(None, args.shapes.split(",")):
        time_shape(*(int(x) for x in sh.split("x")), True)
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "sm90_check.json"), "w") as f:
    json.dump(res, f, indent=1)
worst = {}
for e in res["checks"]:
    key = (e["pass"], e["variant"])
    m = max(v for k, v in e.items() if k in ("O", "L", "dQ", "dK", "dV"))
    worst[key] = max(worst.get(key, 0.0), m) if m == m else float("nan")
print(f"checks: {len(res['checks'])} cases, {len(failures)} failures")
bits = {}
for e in res["checks"]:
    if "same_bits" in e:
        k = (e["variant"], e["same_bits_as"])
        n, eq = bits.get(k, (0, 0))
        bits[k] = (n + 1, eq + int(e["same_bits"]))
for (v, w), (n, eq) in sorted(bits.items()):
    print(f"  forward v{v}: O and L bit for bit those of v{w} in {eq} of {n} cases")
for f_ in failures[:20]:
    print("FAIL", f_)
for k, v in sorted(worst.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
    print(f"  worst rel error {k[0]} {k[1] if k[1] == 'prod' else f'v{k[1]}'}: {v:.2e}")
print(f"{'shape':26} {'pass':5} {'kernel':10} {'ms':>8} {'TFLOP/s':>8}")
for t in res["timing"]:
    print(f"{t['shape']:26} {t['pass']:5} {t['kernel']:10} {t['ms']:8.3f} {t['tflops']:8.1f}")
