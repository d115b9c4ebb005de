# Microbench: one layer's backward GEMMs (trainer's order, kept activations) with the weight-gradient GEMMs on the
# compute stream (seq) or on a side stream joined by events (side). CUDA graphs of 8 layers, bf16 operands, fp32 dW.
import torch, sys, json
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
dev = "cuda"; bf = torch.bfloat16; f32 = torch.float32
OUT_DTYPE = True
try:
    _a = torch.randn(64, 64, device=dev, dtype=bf); _o = torch.empty(64, 64, device=dev, dtype=f32)
    torch.mm(_a, _a, out_dtype=f32, out=_o)
except Exception as e:
    print("no out_dtype:", e); OUT_DTYPE = False
print("fp32 dW via out_dtype:", OUT_DTYPE)
def mm(a, b, out):
    if out.dtype != a.dtype: return torch.mm(a, b, out_dtype=out.dtype, out=out)
    return torch.mm(a, b, out=out)
def run(N, D, F, layers, side, fp32_dw=True):
    r = lambda *s: torch.randn(*s, device=dev, dtype=bf) * 0.05
    gdt = f32 if fp32_dw else bf
    W2, W13, Wo, Wqkv = r(D, F), r(2 * F, D), r(D, D), r(3 * D, D)
    L = []
    for l in range(layers):
        L.append(dict(g=r(N, F), h2=r(N, D), ab=r(N, 2 * F), attn=r(N, D), h1=r(N, D),
                      gW2=torch.empty(D, F, device=dev, dtype=gdt), gW13=torch.empty(2 * F, D, device=dev, dtype=gdt),
                      gWo=torch.empty(D, D, device=dev, dtype=gdt), gWqkv=torch.empty(3 * D, D, device=dev, dtype=gdt)))
    dx, dg, dab, dh, dqkv = r(N, D), r(N, F), r(N, 2 * F), r(N, D), r(N, 3 * D)
    main = torch.cuda.current_stream(); s2 = torch.cuda.Stream()
    def layer(a):
        mm(dx, W2, dg)                       # dg = dx W2
        torch.mul(a["ab"], 1.0001, out=dab)  # swiglu_bwd stand-in (bytes of ab in, dab out)
        if side:
            s2.wait_stream(main)
            with torch.cuda.stream(s2):
                mm(dx.t(), a["g"], a["gW2"]); e2 = torch.cuda.Event(); e2.record(s2)
                mm(dab.t(), a["h2"], a["gW13"]); e13 = torch.cuda.Event(); e13.record(s2)
        else:
            mm(dx.t(), a["g"], a["gW2"]); mm(dab.t(), a["h2"], a["gW13"])
        mm(dab, W13, dh)                     # dh2 = dab W13
        if side: main.wait_event(e2)
        dx.add_(dh)                          # rmsnorm_bwd stand-in
        mm(dx, Wo, dh)                       # d_attn
        if side:
            s2.wait_stream(main)
            with torch.cuda.stream(s2):
                mm(dx.t(), a["attn"], a["gWo"]); eo = torch.cuda.Event(); eo.record(s2)
            main.wait_event(e13)
        else:
            mm(dx.t(), a["attn"], a["gWo"])
        dqkv.mul_(1.0001)                    # attention_bwd stand-in (writes dqkv)
        if side:
            s2.wait_stream(main)
            with torch.cuda.stream(s2):
                mm(dqkv.t(), a["h1"], a["gWqkv"])
        else:
            mm(dqkv.t(), a["h1"], a["gWqkv"])
        mm(dqkv, Wqkv, dh)                   # dh1
        if side: main.wait_event(eo)
        dx.add_(dh)
        if side: main.wait_stream(s2)
    def step():
        for a in L: layer(a)
    for _ in range(3): step()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    for _ in range(5): g.replay()
    ts = []
    for rep in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); 
        for _ in range(10): g.replay()
        e1.record(); torch.cuda.synchronize(); ts.append(e0.elapsed_time(e1) / 10 / layers)
    ts.sort()
    return ts[len(ts) // 2]
res = {}
for name, (N, D, F) in {"xl": (2048, 2560, 10240), "small": (2048, 768, 3072), "medium": (2048, 1024, 4096)}.items():
    for rep in range(2):
        for side in (False, True):
            t = run(N, D, F, 8, side, OUT_DTYPE)
            res.setdefault(name + ("_side" if side else "_seq"), []).append(t)
            print(f"{name} {'side' if side else 'seq '} {t*1000:8.1f} us/layer", flush=True)
print(json.dumps(res))
