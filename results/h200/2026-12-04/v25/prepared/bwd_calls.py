"""v25: N calls of the production backward of libflashbench.so (after one forward for O and L), for ncu.
usage: bwd_calls.py LIB B T H d N [V [C]]: V 0 (default) the production backward (fa_bwd), else fa_bwd_sm90's
variant V (the flash bench's variants: dq_accum zeroed by the preprocess); C 1 (default) causal, 0 not (call4's copy,
with C added for call5)"""
import ctypes, math, sys
import torch
sys.path.insert(0, "launch/flash_bench")
from torch_ref import stream
lib = sys.argv[1]; B, T, H, d, N = (int(x) for x in sys.argv[2:7])
V = int(sys.argv[7]) if len(sys.argv) > 7 else 0
C = int(sys.argv[8]) if len(sys.argv) > 8 else 1
ci, vp, cf = ctypes.c_int, ctypes.c_void_p, ctypes.c_float
prod = ctypes.CDLL(lib)
prod.fa_fwd.argtypes = [ci, vp, vp, vp, ci, ci, ci, ci, ci, ci, ci, cf, vp]
prod.fa_bwd_ws.argtypes = [ci, ci, ci, ci, ci, ci]
prod.fa_bwd_ws.restype = ctypes.c_size_t
prod.fa_bwd.argtypes = [ci, vp, ci, vp, vp, vp, ci, vp, vp, ci, ci, ci, ci, ci, ci, cf, vp]
prod.fa_bwd_sm90.argtypes = [ci, vp, vp, vp, vp, vp, vp, ci, ci, ci, ci, ci, cf, vp]
dev = torch.device("cuda")
qkv = torch.randn(B * T, 3 * H * d, device=dev).to(torch.bfloat16)
dout = torch.randn(B * T, H * d, device=dev).to(torch.bfloat16)
out = torch.empty(B * T, H * d, device=dev, dtype=torch.bfloat16)
lse = torch.empty(B, H, T, device=dev, dtype=torch.float32)
dq = torch.empty(B * T, 3 * H * d, device=dev, dtype=torch.bfloat16)
ws = torch.empty(prod.fa_bwd_ws(B, T, H, d, 1, 0) // 4 + 64, device=dev, dtype=torch.float32)
wsv = torch.empty(B * H * T * (d + 1) + 64, device=dev, dtype=torch.float32)  # as sm90_check.py's bwd()
sc = 1.0 / math.sqrt(d)
prod.fa_fwd(0, qkv.data_ptr(), out.data_ptr(), lse.data_ptr(), B, T, H, d, C, 1, 0, sc, stream())
for _ in range(N):
    if V:
        prod.fa_bwd_sm90(V, dq.data_ptr(), dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), lse.data_ptr(),
                         wsv.data_ptr(), B, T, H, d, C, sc, stream())
        continue
    prod.fa_bwd(0, dq.data_ptr(), 0, dout.data_ptr(), qkv.data_ptr(), out.data_ptr(), 0, lse.data_ptr(), ws.data_ptr(),
                B, T, H, d, C, 1, sc, stream())
torch.cuda.synchronize()
