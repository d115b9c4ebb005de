"""v25: one kernel (the production d 128 forward or backward of libflashbench.so, 1 x 16 heads, T 16384, causal) run
back to back for S seconds, each call timed by CUDA events, with wall times; beside nvidia-smi's clock/power log, so
that TFLOP/s can be set against the SM clock. usage: sustain.py LIB fwd|bwd SECONDS OUT.json"""
import ctypes, json, math, sys, time
import torch
sys.path.insert(0, "launch/flash_bench")
from torch_ref import stream
lib, which, secs, outp = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
ci, vp, cf = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
prod = ctypes.CDLL(lib)
prod.fa_fwd.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, ci, cf, vp]
prod.fa_bwd_ws.argtypes = [ci, ci, ci, ci, ci, ci]
prod.fa_bwd_ws.restype = ctypes.c_size_t
prod.fa_bwd.argtypes = [ci, vp, ci, vp, vp, vp, ci, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]
B, T, H, d = 1, 16384, 16, 128
dev = torch.device("cuda")
qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
dq = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
ws = torch.empty(prod.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
sc = 1.0 / math.sqrt(d)
f_fwd = lambda: prod.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, 1, 1, 0, sc, stream())
f_bwd = lambda: prod.fa_bwd(0, dq.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0, lse.data_ptr(),
                            ws.data_ptr(), B, T, H, d, 1, 1, sc, stream())
f_fwd(); torch.cuda.synchronize()
fn = f_fwd if which == "fwd" else f_bwd
fl = 2.0 * T * T * d * B * H * {"fwd": 1.0, "bwd": 2.5}[which]
rec = []
t0 = time.time()
while time.time() - t0 < secs:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); fn(); b.record(); b.synchronize()
    ms = a.elapsed_time(b)
    rec.append((time.time(), ms))
json.dump({"which": which, "flop": fl, "calls": rec}, open(outp, "w"))
ms = sorted(m for _, m in rec)
print(f"{which}: {len(ms)} calls, median {ms[len(ms)//2]:.3f} ms = {fl / ms[len(ms)//2] / 1e9:.1f} TFLOP/s, "
      f"first {rec[0][1]:.3f} min {ms[0]:.3f} max {ms[-1]:.3f}")
