#!/usr/bin/env python3
"""The production attention forward or backward (libflashbench.so, launch/flash_bench/build.sh) run back to back for
a few seconds, beside nvidia-smi's SM clock, power and throttle reasons, so that a kernel's TFLOP/s can be read
against the clock it ran at: whether a change saves cycles or only moves the power cap.

  python3 launch/flash_bench/sustain.py [--lib L] [--pass bwd] [--shape 1x16384x16x128] [--seconds 8] [--out DIR]

Each call is timed by CUDA events; every second gets one line: calls, median ms and TFLOP/s (causal FLOPs: forward
2 T^2 d B H, backward 2.5x), median SM clock (MHz), power (W), temperature (C) and nvidia-smi's throttle reasons
(clocks_event_reasons.active: 0x4 the software power cap, 0x1 idle). Writes sustain.json (calls with their wall times,
the smi samples) under --out. Measured on one H200 (results/h200/2026-12-04/v25/call3): the d 128 backward and
forward both run at the 700 W cap after the first second (SM clock 1.65-1.68 GHz and 1.55-1.61 GHz of 1.98).
Needs PyTorch with CUDA (the inputs) and nvidia-smi on PATH (else the clock columns are empty).
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lib", default=".carry/flash/libflashbench.so")
p.add_argument("--pass", dest="which", choices=("fwd", "bwd"), default="bwd")
p.add_argument("--shape", default="1x16384x16x128", help="BxTxHxd, causal, bf16")
p.add_argument("--seconds", type=float, default=8.0)
p.add_argument("--out", default=os.environ.get("OUT", "."))
args = p.parse_args()
try:
    B, T, H, d = (int(x) for x in args.shape.split("x"))
except ValueError:
    p.error(f"--shape {args.shape!r}: expected BxTxHxd, e.g. 1x16384x16x128")
if not os.path.exists(args.lib):
    p.error(f"--lib {args.lib}: not found (build it with launch/flash_bench/build.sh)")

try:  # after the arguments, so that --help works without PyTorch
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_ref import stream
except ImportError as e:
    p.error(f"needs PyTorch with CUDA, not importable by {sys.executable} ({e})")

ci, vp, cf = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
lib = ctypes.CDLL(os.path.abspath(args.lib))
lib.fa_fwd.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, ci, cf, vp]
lib.fa_fwd.restype = ci
lib.fa_bwd_ws.argtypes = [ci, ci, ci, ci, ci, ci]
lib.fa_bwd_ws.restype = ctypes.c_size_t
lib.fa_bwd.argtypes = [ci, vp, ci, vp, vp, vp, ci, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]
lib.fa_bwd.restype = ci
dev = torch.device("cuda")
qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
dqkv = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
ws = torch.empty(lib.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
sc = 1.0 / math.sqrt(d)


def fwd():
    return lib.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, 1, 1, 0, sc, stream())


def bwd():
    return lib.fa_bwd(0, dqkv.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0, lse.data_ptr(),
                      ws.data_ptr(), B, T, H, d, 1, 1, sc, stream())


fn = fwd if args.which == "fwd" else bwd
if fwd() != 0 or fn() != 0:
    sys.exit(f"sustain: the library refused {args.which} at {args.shape} (see its message above)")
torch.cuda.synchronize()
flop = 2.0 * T * T * d * B * H * (1.0 if args.which == "fwd" else 2.5)

smi_fields = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"
try:
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={smi_fields}", "--format=csv,noheader,nounits", "-lms", "50",
                            "-i", str(torch.cuda.current_device())], stdout=subprocess.PIPE, text=True)
except OSError:
    smi = None
time.sleep(0.5)
calls = []
t_end = time.time() + args.seconds
while time.time() < t_end:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    fn()
    b.record()
    b.synchronize()
    calls.append((time.time(), a.elapsed_time(b)))
samples = []
if smi is not None:
    time.sleep(0.2)
    smi.terminate()
    for line in smi.communicate()[0].splitlines():
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as time.time()
            samples.append((t, float(f[1]), float(f[2]), float(f[3]), f[4]))
        except (ValueError, IndexError):
            pass

os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "sustain.json"), "w") as fh:
    json.dump({"pass": args.which, "shape": args.shape, "flop": flop, "device": torch.cuda.get_device_name(),
               "calls": calls, "smi": samples}, fh)
print(f"{args.which} {args.shape} causal bf16 on {torch.cuda.get_device_name()}: {len(calls)} calls")
print(f"{'second':>6} {'calls':>5} {'ms':>8} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>5} {'C':>4}  reasons")
t0 = calls[0][0]
for k in range(int(calls[-1][0] - t0) + 1):
    ms = [m for t, m in calls if t0 + k <= t < t0 + k + 1]
    sm = [s for s in samples if t0 + k <= s[0] < t0 + k + 1]
    if not ms:
        continue
    med = statistics.median(ms)
    clk = f"{statistics.median(s[1] for s in sm):7.0f} {statistics.median(s[2] for s in sm):5.0f} " \
          f"{statistics.median(s[3] for s in sm):4.0f}  {','.join(sorted(set(s[4] for s in sm)))}" if sm else ""
    print(f"{k:6d} {len(ms):5d} {med:8.3f} {flop / med / 1e9:8.1f} {clk}")
all_ms = sorted(m for _, m in calls)
med = all_ms[len(all_ms) // 2]
print(f"all: median {med:.3f} ms = {flop / med / 1e9:.1f} TFLOP/s (min {all_ms[0]:.3f}, max {all_ms[-1]:.3f})")
