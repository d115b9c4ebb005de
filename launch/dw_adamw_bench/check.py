#!/usr/bin/env python3
"""GPU check and timing of the fused weight gradient + AdamW kernel (kernels/dw_adamw/, through libdwa.so of
launch/dw_adamw_bench/build.sh) against float64 and against the path it would replace (cuBLASLt dW into an fp32
gradient, then kernels::adamw).

  python3 launch/dw_adamw_bench/check.py [--lib .carry/dwa/libdwa.so] [--out DIR] [--no-check] [--no-time]
                                         [--rounds N] [--shapes xl,small] [--quick] [--weights W,..]
                                         [--variants V,..] [--same-as OTHER_LIB [--same-order-free]] [--k K]
                                         [--check-shapes I,..] [--unfused autotune|heuristic|off]

Checks, per shape (ragged, strided and the xl / small block's weights; fresh random inputs, outputs NaN-poisoned):
  grad      the kernel's dW (update off, gradient written) against dYᵀX in float64: normwise relative error below
            max(1e-5, 3 x cuBLASLt's on the same inputs) and every element within 2e-4 of (|dY|ᵀ|X|) (fp32
            accumulation over K); every element written.
  update    p, m, v against AdamW in float64 applied to the kernel's own gradient: each within 1e-6 of its scale
            (the magnitudes of the terms that make it); p_work = bf16(p) exactly; every element written.
  same      the update without the gradient output gives the same bits; a second run from the same state gives the
            same bits (deterministic).
  sumsq     the kernel's sum of g² against the float64 sum of the gradient's squares: relative < 1e-6.
  grad_in   with an fp32 gradient to add to (the earlier microbatches' sum): g = fl(grad_in + the product) bit for
            bit, the update from that g as above, and the same bits in place (grad_in the gradient output).
  unfused   today's path on the same inputs: its gradient's normwise error (information) and the largest p difference
            from the fused kernel's, in units of the step size (information).
--same-as OTHER_LIB: the fused update (with and without grad_in) through both builds from the same state, on five
of the check shapes and xl's four weights: p, m, v, p_work and the sum of g² equal bit for bit (a failure each
differing array; e.g. an experimental build such as libdwa_wide.so against libdwa.so; --same-order-free leaves
the sum of g² out, for a build that sums in another order).
Timing (--rounds N rounds of every variant in turn, after a warm-up, five calls each queued behind a sleep kernel so
that host time is not counted; median per variant): the fused kernel (alone, and with grad_in: a last
microbatch's), today's path (autotuned cuBLASLt + adamw), and each product alone (ours with its fp32 gradient
written, cuBLASLt's); per shape and summed per block (xl: Wqkv, Wo, [W1; W3], W2 at 4 x 512 tokens; small alike;
--weights and --variants pick a subset, e.g. under ncu), with the floor: max(FLOPs at 756 TFLOP/s, the 26 bytes a parameter at 3.85 TB/s). Writes dwa_check.json under --out and
prints a table last.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--lib", default=".carry/dwa/libdwa.so")
p.add_argument("--out", default=".")
p.add_argument("--no-check", action="store_true")
p.add_argument("--no-time", action="store_true")
p.add_argument("--rounds", type=int, default=11)
p.add_argument("--quick", action="store_true", help="only the shapes up to 2000 x 2056 (for compute-sanitizer)")
p.add_argument("--unfused", default="autotune", choices=["autotune", "heuristic", "off"],
               help="checks: today's path (cuBLASLt) with its autotuning (the trainer's default), with cuBLASLt's first "
               "heuristic choice, or not at all (the gradient's tolerance then 1e-5 normwise; no 'p vs today'). Under "
               "compute-sanitizer racecheck an autotuning candidate of cuBLASLt fails (v38): heuristic or off there")
p.add_argument("--check-shapes", default="", help="only these check shapes, by index in the list (0-10; 0-6 with "
               "--quick; e.g. 0,2 under compute-sanitizer)")
p.add_argument("--shapes", default="xl,small", help="blocks to time: xl, small (comma-separated)")
p.add_argument("--weights", default="", help="only these weights (Wqkv,Wo,W13,W2; e.g. for ncu)")
p.add_argument("--same-as", default="", help="another build of the library (e.g. dwa/libdwa_wide.so): its fused "
               "update must equal this one's bit for bit (p, m, v, p_work, the sum of g^2; with and without grad_in) on "
               "the check shapes and xl's four (a failure each)")
p.add_argument("--k", type=int, default=0, help="timing: K (tokens) of every product instead of 4 x 512 (e.g. 64: "
               "the epilogue nearly alone)")
p.add_argument("--same-order-free", action="store_true", help="--same-as: leave the sum of g^2 out (a build that "
               "sums the elements in another order, e.g. libdwa_wide.so)")
p.add_argument("--variants", default="", help="only these timing variants (names as in the table; e.g. for ncu)")
args = p.parse_args()

ci, cf, vp = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
lib = ctypes.CDLL(os.path.abspath(args.lib))
lib.dwa_fused.argtypes = [vp, ci, vp, ci, ci, ci, ci, vp, vp, vp, vp, vp, vp, ci, vp, vp, cf, cf, cf, cf, cf, cf, vp]
other = None
if args.same_as:
    other = ctypes.CDLL(os.path.abspath(args.same_as))
    other.dwa_fused.argtypes = lib.dwa_fused.argtypes
lib.dwa_unfused.argtypes = [vp, ci, vp, ci, ci, ci, ci, vp, vp, vp, vp, vp, ci, vp, vp, cf, cf, cf, cf, cf, cf, ci,
                            vp]
dev = torch.device("cuda")
PARTIALS = torch.empty(1024, device=dev, dtype=torch.float64)  # the kernels' per-block sums of g² (scratch)
torch.backends.cuda.matmul.allow_tf32 = False

# AdamW's constants as the trainer computes them (optim/adamw.cpp): lr 1e-3, weight decay 0.1, step t 3
LR, WD, B1, B2, EPS, T = 1e-3, 0.1, 0.9, 0.95, 1e-8, 3
DECAY = LR * WD
STEP = LR * math.sqrt(1 - B2**T) / (1 - B1**T)
GSCALE = 1.0


def ptr(t):
    return ctypes.c_void_p(t.data_ptr()) if t is not None else None


class Problem:
    """dY [K, M] (row stride ld_dy), X [K, N] bf16; p, m, v fp32 [M, N], p_work bf16; a mid-training state."""

    def __init__(self, M, N, K, ld_dy=None, seed=0):
        g = torch.Generator(device=dev).manual_seed(seed)
        self.M, self.N, self.K = M, N, K
        self.ld_dy = ld_dy or M
        base = torch.randn(K, self.ld_dy, device=dev, generator=g).to(torch.bfloat16)
        self.dy = base[:, :M]
        self.x = torch.randn(K, N, device=dev, generator=g).to(torch.bfloat16)
        self.p0 = torch.randn(M, N, device=dev, generator=g) * 0.02
        gs = math.sqrt(K)  # the gradient's typical size
        self.m0 = torch.randn(M, N, device=dev, generator=g) * gs * 0.1
        self.v0 = (torch.rand(M, N, device=dev, generator=g) + 0.5) * gs * gs * 0.05
        self.reset()

    def reset(self):
        self.p, self.m, self.v = self.p0.clone(), self.m0.clone(), self.v0.clone()
        self.p_work = torch.full((self.M, self.N), float("nan"), device=dev, dtype=torch.bfloat16)

    def fused(self, update=True, grad=None, sumsq=None, grad_in=None, which=None):
        r = (which or lib).dwa_fused(ptr(self.dy), self.ld_dy, ptr(self.x), self.N, self.M, self.N, self.K, ptr(self.p),
                          ptr(self.m), ptr(self.v), ptr(self.p_work), ptr(grad), ptr(grad_in), int(update),
                          ptr(PARTIALS if sumsq is not None else None), ptr(sumsq), B1, B2, EPS, DECAY, STEP, GSCALE,
                          None)
        if r != 0:
            raise SystemExit(f"dwa_fused refused M {self.M} N {self.N} K {self.K}")

    def unfused(self, g, update=True, partials=None, sumsq=None, autotune=True):
        lib.dwa_unfused(ptr(self.dy), self.ld_dy, ptr(self.x), self.N, self.M, self.N, self.K, ptr(self.p),
                        ptr(self.m), ptr(self.v), ptr(self.p_work), ptr(g), int(update), ptr(partials), ptr(sumsq),
                        B1, B2, EPS, DECAY, STEP, GSCALE, int(autotune), None)


def fmt(x):
    """A measured number as 1.2e-07; '-' for one not measured (None)."""
    return "-" if x is None else f"{x:.1e}"


def adamw64(p, g, m, v):
    p, g, m, v = p.double(), g.double() * GSCALE, m.double(), v.double()
    p = p - DECAY * p
    m = B1 * m + (1 - B1) * g
    v = B2 * v + (1 - B2) * g * g
    step = STEP * m / (v.sqrt() + EPS)
    return p - step, m, v, step


def check_shape(M, N, K, ld_dy=None):
    res = {"M": M, "N": N, "K": K, "ld_dy": ld_dy or M, "fail": []}
    pr = Problem(M, N, K, ld_dy, seed=M * 7 + N * 13 + K)
    ref = pr.dy.double().t() @ pr.x.double()
    bound = pr.dy.double().abs().t() @ pr.x.double().abs()
    # today's gradient (cuBLASLt on the same tensor cores): the yardstick for the accumulation's rounding
    g_u = torch.empty(M, N, device=dev)
    res["unfused_grad_rel"] = None  # (--unfused off: not measured)
    if args.unfused != "off":
        pr.unfused(g_u, update=False, autotune=args.unfused == "autotune")
        torch.cuda.synchronize()
        res["unfused_grad_rel"] = float((g_u.double() - ref).norm() / ref.norm())
    grad_tol = max(1e-5, 3 * res["unfused_grad_rel"]) if args.unfused != "off" else 1e-5
    # grad
    grad = torch.full((M, N), float("nan"), device=dev)
    pr.fused(update=False, grad=grad)
    torch.cuda.synchronize()
    if torch.isnan(grad).any():
        res["fail"].append("grad: elements not written")
    err = (grad.double() - ref)
    res["grad_rel"] = float(err.norm() / ref.norm())
    res["grad_elem"] = float((err.abs() / bound.clamp_min(1e-30)).max())
    if not res["grad_rel"] < grad_tol or not res["grad_elem"] < 2e-4:
        bad = (err.abs() > 2e-4 * bound) | torch.isnan(grad)
        first = [int(i) for i in bad.nonzero()[0]] if bad.any() else []
        res["fail"].append(f"grad: normwise {res['grad_rel']:.2e}, elementwise {res['grad_elem']:.2e}; "
                           f"{int(bad.sum())} of {M * N} elements wrong, the first at (row, column) {first}")
    # update (with its gradient written), against float64 AdamW of that gradient
    sumsq = torch.full((1,), float("nan"), device=dev, dtype=torch.float64)
    g2 = torch.full((M, N), float("nan"), device=dev)
    pr.reset()
    pr.fused(update=True, grad=g2, sumsq=sumsq)
    torch.cuda.synchronize()
    if not torch.equal(g2, grad):
        res["fail"].append("grad: differs between the update and the gradient-only kernel")
    p64, m64, v64, _ = adamw64(pr.p0, g2, pr.m0, pr.v0)
    # each result's scale: the magnitudes of the terms that make it (a result that cancels is judged by its terms)
    m_terms = B1 * pr.m0.double().abs() + (1 - B1) * g2.double().abs() * GSCALE
    p_terms = pr.p0.double().abs() + STEP * m_terms / (v64.sqrt() + EPS)
    for name, got, want, scale in (("p", pr.p, p64, p_terms), ("m", pr.m, m64, m_terms), ("v", pr.v, v64, v64.abs())):
        if torch.isnan(got).any():
            res["fail"].append(f"{name}: NaN")
        e = float(((got.double() - want).abs() / scale.clamp_min(1e-30)).max())
        res[f"{name}_err"] = e
        if not e < 1e-6:
            res["fail"].append(f"{name}: {e:.2e} of its scale")
    if not torch.equal(pr.p_work, pr.p.to(torch.bfloat16)):
        res["fail"].append("p_work != bf16(p)")
    s64 = float((g2.double() ** 2).sum())
    res["sumsq_rel"] = abs(float(sumsq[0]) - s64) / s64
    if not res["sumsq_rel"] < 1e-6:
        res["fail"].append(f"sumsq: {res['sumsq_rel']:.2e}")
    # same bits without the gradient output, and on a second run
    first = (pr.p.clone(), pr.m.clone(), pr.v.clone(), pr.p_work.clone())
    for run in ("no grad output", "second run"):
        pr.reset()
        pr.fused(update=True, grad=None if run == "no grad output" else g2)
        torch.cuda.synchronize()
        if not all(torch.equal(a, b) for a, b in zip(first, (pr.p, pr.m, pr.v, pr.p_work))):
            res["fail"].append(f"bits differ: {run}")
    # with grad_in (the earlier microbatches' sum): g = grad_in + the same accumulator, one fp32 add, so exactly
    # fl(grad_in + grad); the update as above from that g; grad_in may be the gradient output itself
    g_in = torch.randn(M, N, device=dev, generator=torch.Generator(device=dev).manual_seed(M + N)) * float(
        g2.abs().mean())
    g3 = torch.full((M, N), float("nan"), device=dev)
    sumsq3 = torch.full((1,), float("nan"), device=dev, dtype=torch.float64)
    pr.reset()
    pr.fused(update=True, grad=g3, grad_in=g_in, sumsq=sumsq3)
    torch.cuda.synchronize()
    got3 = (pr.p.clone(), pr.m.clone(), pr.v.clone())  # the update from g3, for the in-place case below
    if not torch.equal(g3, g_in + g2):
        res["fail"].append(f"grad_in: g != grad_in + product ({int((g3 != g_in + g2).sum())} elements)")
    s64 = float((g3.double() ** 2).sum())
    if not abs(float(sumsq3[0]) - s64) / s64 < 1e-6:
        res["fail"].append(f"grad_in: sumsq {abs(float(sumsq3[0]) - s64) / s64:.2e}")
    if not torch.equal(pr.p_work, pr.p.to(torch.bfloat16)):
        res["fail"].append("grad_in: p_work != bf16(p)")
    p64, m64, v64, _ = adamw64(pr.p0, g3, pr.m0, pr.v0)
    m_terms = B1 * pr.m0.double().abs() + (1 - B1) * g3.double().abs() * GSCALE
    p_terms = pr.p0.double().abs() + STEP * m_terms / (v64.sqrt() + EPS)
    res["grad_in_err"] = max(float(((got.double() - want).abs() / scale.clamp_min(1e-30)).max()) for got, want, scale in
                             ((pr.p, p64, p_terms), (pr.m, m64, m_terms), (pr.v, v64, v64.abs())))
    if not res["grad_in_err"] < 1e-6:
        res["fail"].append(f"grad_in: update {res['grad_in_err']:.2e} of its scale")
    aliased = g_in.clone()
    pr.reset()
    pr.fused(update=False, grad=aliased, grad_in=aliased)
    torch.cuda.synchronize()
    if not torch.equal(aliased, g3):
        res["fail"].append("grad_in: in place (grad_in = grad) differs")
    # in place with the update too (p, m, v and grad_in staged together): the same gradient and the same update
    aliased = g_in.clone()
    pr.reset()
    pr.fused(update=True, grad=aliased, grad_in=aliased)
    torch.cuda.synchronize()
    if not torch.equal(aliased, g3) or not all(torch.equal(a, b) for a, b in zip(got3, (pr.p, pr.m, pr.v))):
        res["fail"].append("grad_in: in place with the update differs")
    # today's update, for information
    res["p_diff_steps"] = None
    if args.unfused != "off":
        pr.reset()
        pr.unfused(g_u, autotune=args.unfused == "autotune")
        torch.cuda.synchronize()
        res["p_diff_steps"] = float(((pr.p - first[0]).abs().max()) / STEP)
    return res


XL = {"Wqkv": (7680, 2560), "Wo": (2560, 2560), "W13": (20480, 2560), "W2": (2560, 10240)}
SMALL = {"Wqkv": (2304, 768), "Wo": (768, 768), "W13": (6144, 768), "W2": (768, 3072)}
TOKENS = 4 * 512


def time_block(name, weights, rounds):
    rows = []
    if args.weights and set(args.weights.split(",")) - set(weights):
        raise SystemExit(f"check.py: unknown --weights {args.weights}; known: {list(weights)}")
    for wname, (M, N) in weights.items():
        if args.weights and wname not in args.weights.split(","):
            continue
        K = args.k or TOKENS
        pr = Problem(M, N, K, seed=1)
        g = torch.zeros(M, N, device=dev)  # also fused_grad_in's grad_in
        partials = torch.empty(1024, device=dev, dtype=torch.float64)
        sumsq = torch.empty(1, device=dev, dtype=torch.float64)
        variants = {
            "fused": lambda: pr.fused(update=True, sumsq=sumsq),
            "fused_grad_in": lambda: pr.fused(update=True, sumsq=sumsq, grad_in=g),  # the last microbatch
            "today": lambda: pr.unfused(g, update=True, partials=partials, sumsq=sumsq),
            "gemm_ours": lambda: pr.fused(update=False, grad=g),
            "gemm_cublaslt": lambda: pr.unfused(g, update=False),
        }
        if args.variants:
            unknown = set(args.variants.split(",")) - set(variants)
            if unknown:
                raise SystemExit(f"check.py: unknown --variants {sorted(unknown)}; known: {list(variants)}")
            variants = {k: f for k, f in variants.items() if k in args.variants.split(",")}
        for f in variants.values():  # warm-up (autotuning on the first cuBLASLt call)
            f()
            f()
        torch.cuda.synchronize()
        times = {k: [] for k in variants}
        for _ in range(rounds):
            for k, f in variants.items():
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(2_000_000)  # the GPU waits ~1 ms while the host queues the calls: no host time
                e0.record()
                for _ in range(5):
                    f()
                e1.record()
                e1.synchronize()
                times[k].append(e0.elapsed_time(e1) / 5)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        flops = 2.0 * M * N * K
        floor = max(flops / 756e12, 26.0 * M * N / 3.85e12) * 1e3
        row = {"block": name, "weight": wname, "M": M, "N": N, "K": K, "median_ms": med,
               "spread_ms": {k: [min(v), max(v)] for k, v in times.items()}, "floor_ms": floor}
        for k in ("gemm_ours", "gemm_cublaslt"):  # absent from a --variants subset
            if k in med:
                row[f"tflops_{k}"] = flops / med[k] / 1e9
        rows.append(row)
        del pr, g
        torch.cuda.empty_cache()
    return rows


out = {"device": torch.cuda.get_device_name(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "checks": [],
       "timing": []}
failures = 0
if not args.no_check:
    shapes = [(128, 128, 64), (64, 8, 16), (200, 136, 100), (256, 384, 4096), (384, 256, 512, 448),
              (1000, 1000, 333), (2000, 2056, 200), (2304, 768, 2048), (768, 3072, 2048), (7680, 2560, 2048),
              (2560, 10240, 2048)]
    if args.quick:
        shapes = shapes[:7]
    if args.check_shapes:
        picked = args.check_shapes.split(",")
        if not all(i.isdigit() and int(i) < len(shapes) for i in picked):
            raise SystemExit(f"check.py: error: --check-shapes {args.check_shapes}: indices 0-{len(shapes) - 1} of "
                             f"the {'quick ' if args.quick else ''}check shapes")
        shapes = [shapes[int(i)] for i in picked]
    for s in shapes:
        r = check_shape(*s)
        out["checks"].append(r)
        failures += len(r["fail"])
        print(f"check M {r['M']} N {r['N']} K {r['K']} ld_dy {r['ld_dy']}: grad {r['grad_rel']:.1e} "
              f"(elem {r['grad_elem']:.1e}; cuBLASLt {fmt(r['unfused_grad_rel'])}), p {r['p_err']:.1e} "
              f"m {r['m_err']:.1e} v {r['v_err']:.1e}, sumsq {r['sumsq_rel']:.1e}, grad_in {r['grad_in_err']:.1e}, "
              f"p vs today "
              f"{fmt(r['p_diff_steps'])} steps: {'FAIL ' + '; '.join(r['fail']) if r['fail'] else 'ok'}", flush=True)
if other is not None:
    # The same inputs through both builds: the fused update, then the same with grad_in (the last microbatch)
    same_shapes = [(128, 128, 64), (64, 8, 16), (200, 136, 100), (1000, 1000, 333), (2000, 2056, 200)] + \
        [(M, N, TOKENS) for M, N in XL.values()]
    for M, N, K in same_shapes:
        pr = Problem(M, N, K, seed=M + 3 * N + 5 * K)
        gi = torch.randn(M, N, device=dev) * math.sqrt(K)
        got = []
        for which in (lib, other):
            for grad_in in (None, gi):
                pr.reset()
                ss = torch.full((1,), float("nan"), device=dev, dtype=torch.float64)
                pr.fused(update=True, sumsq=ss, grad_in=None if grad_in is None else grad_in.clone(), which=which)
                torch.cuda.synchronize()
                got.append([pr.p.clone(), pr.m.clone(), pr.v.clone(), pr.p_work.clone(), ss.clone()])
        diff = [name + (" (grad_in)" if half else "") for half in (0, 1)
                for name, a, b in zip(("p", "m", "v", "p_work", "sumsq"), got[half], got[2 + half])
                if not torch.equal(a, b) and not (name == "sumsq" and args.same_order_free)]
        failures += len(diff)
        print(f"same as {args.same_as}: M {M} N {N} K {K}: " + ("equal" if not diff else "DIFFER in " + ", ".join(diff)),
              flush=True)
        del pr, gi, got
        torch.cuda.empty_cache()
if not args.no_time:
    for b in args.shapes.split(","):
        out["timing"] += time_block(b, {"xl": XL, "small": SMALL}[b], args.rounds)
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "dwa_check.json"), "w") as f:
    json.dump(out, f, indent=1)
if out["timing"]:
    keys = [k for k in out["timing"][0]["median_ms"]]
    print(f"{'block':6} {'weight':5} {'M':>6} {'N':>6} " + " ".join(f"{k:>19}" for k in keys) + f" {'floor':>7}")
    sums = {}
    for r in out["timing"]:
        print(f"{r['block']:6} {r['weight']:5} {r['M']:6} {r['N']:6} " +
              " ".join(f"{r['median_ms'][k]:19.4f}" for k in keys) + f" {r['floor_ms']:7.4f}")
        s = sums.setdefault(r["block"], {k: 0.0 for k in keys + ["floor"]})
        for k in keys:
            s[k] += r["median_ms"][k]
        s["floor"] += r["floor_ms"]
    for b, s in sums.items():
        print(f"{b:6} {'block':5} {'':6} {'':6} " + " ".join(f"{s[k]:19.4f}" for k in keys) +
              f" {s['floor']:7.4f}" + (f"   fused / today {s['fused'] / s['today']:.3f}" if "fused" in s and "today" in s
                                       else ""))
print(f"dwa check: {failures} failures" if not args.no_check or other is not None else "dwa: no checks run")
sys.exit(1 if failures else 0)
