# Emits the fixed-operand-list wgmma wrappers of kernels/sm90/wgmma.cuh (between its "generated" markers):
#   python3 kernels/sm90/gen_wgmma.py > /tmp/w.inc  (then paste). PTX ISA 8.x, "wgmma.mma_async".
def ss(n):
    nacc = n // 2
    regs = ", ".join(f"%{i}" for i in range(nacc))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(nacc))
    return f'''/// d[{nacc}] (+)= A B, m64n{n}k16: A and B from shared memory (descriptors); tA / tB: 1 = M- / N-major.
template <int kTA, int kTB>
__device__ __forceinline__ void wgmma_ss_n{n}(float (&d)[{nacc}], uint64_t da, uint64_t db, bool accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nacc+2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %{nacc}, %{nacc+1}, p, 1, 1, %{nacc+3}, %{nacc+4};\\n}}\\n"
      : {cons}
      : "l"(da), "l"(db), "r"(int(accumulate)), "n"(kTA), "n"(kTB));
}}
'''
def rs(n):
    nacc = n // 2
    regs = ", ".join(f"%{i}" for i in range(nacc))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(nacc))
    return f'''/// d[{nacc}] (+)= A B, m64n{n}k16: A from registers (a: the mma.m16n8k16 A fragment of this warp's 16 rows), B
/// from shared memory; tB: 1 = N-major.
template <int kTB>
__device__ __forceinline__ void wgmma_rs_n{n}(float (&d)[{nacc}], const uint32_t (&a)[4], uint64_t db, bool accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nacc+5}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, {{%{nacc}, %{nacc+1}, %{nacc+2}, %{nacc+3}}}, %{nacc+4}, p, 1, 1, %{nacc+6};\\n}}\\n"
      : {cons}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(int(accumulate)), "n"(kTB));
}}
'''
out = []
for n in (16, 24, 32, 40, 48, 64, 128):  # 16 / 24 / 40: d 80's dQ column segments, 48 / 16 / 32 d 96's (bwd_sm90.cuh)
    out.append(ss(n))
for n in (64, 80, 96, 128):  # 80 / 96: d 80's / d 96's O, dV, dK
    out.append(rs(n))
print("\n".join(out))
