// FlashAttention backward for Hopper (sm_90a): warpgroup MMAs (wgmma) from 128B-swizzled shared memory.
// Algorithm: FlashAttention-2 backward (Dao 2023, arXiv:2307.08691, Algorithm 2: recomputation with L and
// D = rowsum(dO o O) precomputed; P = exp(S - L), dV += Pᵀ dO, dP = dO Vᵀ, dS = P o (dP - D), dK += dSᵀ Q,
// dQ += dS K, the scale folded into dK and dQ); tensor-core use after FlashAttention-3 (Shah et al. 2024,
// arXiv:2407.08608): the transposed scores are computed directly, Sᵀ = K Qᵀ and dPᵀ = V dOᵀ (K-major operands), so
// that Pᵀ and dSᵀ sit in registers in the layout of an A operand, and dV += Pᵀ dO, dK += dSᵀ Q read dO and Q as
// N-major B operands; dSᵀ is also stored once to shared memory, where it is the M-major A operand of dQ = dS K.
//
// One CTA per (key tile of kBN = 64 kWG keys, head, batch), the longest (causal) key tiles first; warpgroup w owns
// keys 64w..64w+63 of the tile and accumulates their dK, dV in registers over the query tiles (kBM = 64 queries,
// Q / dO / L / D double-buffered through cp.async). dQ: after a CTA barrier each warpgroup computes its kD / kWG
// columns of dQ for the query tile over all kBN keys and adds them into the f32 workspace dq_accum with float2
// atomics (the preprocess pass zeroed it; the convert pass writes dQ = scale · dq_accum). Causal: query tiles that
// end before the key tile starts are never visited; the mask runs only on tiles that need it.
#pragma once
#include "flash_attn/fwd_sm90.cuh"

namespace trainer::flash::sm90 {

/// kD: head dim (64 or 128); kWG: warpgroups (64 keys each); kMinBlocks: __launch_bounds__ CTAs per SM.
template <int kD_, int kWG_ = 2, int kMinBlocks_ = 1>
struct BwdTraits {
  static constexpr int kD = kD_, kWG = kWG_, kBN = 64 * kWG_, kBM = 64, kThreads = 128 * kWG_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kSub = kD / 64;
  static constexpr int kDqN = kD / kWG;  // dQ columns per warpgroup
  static constexpr int kKBytes = kBN * kD * 2, kQBytes = kBM * kD * 2, kDsBytes = kBN * kBM * 2;
  // K, V; 2 stages of Q, dO; dSᵀ; 2 stages of L, D (f32); alignment slack
  static constexpr int kSmemBytes = 2 * kKBytes + 4 * kQBytes + kDsBytes + 4 * kBM * 4 + 1024;
  static_assert((kD == 64 || kD == 128) && (kDqN == 32 || kDqN == 64 || kDqN == 128), "wgmma tiles");
};

/// 4 bytes global -> shared, asynchronously; valid = false writes zeros.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0));
}

template <class Tr, bool kCausal>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) flash_bwd_sm90_kernel(const FlashBwdParams p) {
  using bf16 = __nv_bfloat16;
  constexpr int kD = Tr::kD, kBM = Tr::kBM, kBN = Tr::kBN, kThreads = Tr::kThreads, kSub = Tr::kSub;
  constexpr int kDqN = Tr::kDqN;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* sK = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sV = sK + Tr::kKBytes;
  uint8_t* sQ = sV + Tr::kKBytes;       // [2][kSub][kBM][64]
  uint8_t* sdO = sQ + 2 * Tr::kQBytes;  // [2][kSub][kBM][64]
  uint8_t* sdS = sdO + 2 * Tr::kQBytes; // [kBN keys][kBM queries] (dSᵀ, one sub-tile)
  float* sL = reinterpret_cast<float*>(sdS + Tr::kDsBytes);  // [2][kBM]
  float* sDs = sL + 2 * kBM;                                 // [2][kBM]

  const int n_block = blockIdx.x;  // low key tiles see the most queries (causal): first
  const int h = blockIdx.y, b = blockIdx.z;
  const int T = p.seq_len, n0 = n_block * kBN;
  const int tid = threadIdx.x, wg = tid / 128, warp = (tid % 128) / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t ld = p.qkv_row_stride, ldo = p.o_row_stride;
  const int64_t off = int64_t(b) * p.qkv_batch_stride + int64_t(h) * p.qkv_head_stride;
  const int64_t off_o = int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  const bf16* gq = static_cast<const bf16*>(p.q) + off;
  const bf16* gk = static_cast<const bf16*>(p.k) + off;
  const bf16* gv = static_cast<const bf16*>(p.v) + off;
  const bf16* gdo = static_cast<const bf16*>(p.dout) + off_o;
  const int64_t bh = int64_t(b) * p.num_heads + h;
  const float* glse = p.lse + bh * T;
  const float* gdsum = p.dsum + bh * T;
  float* gdq = p.dq_accum + bh * T * kD;

  const int m_lo = kCausal ? n0 / kBM : 0, m_hi = (T + kBM - 1) / kBM;
  auto load_q_tile = [&](int m, int buf) {
    load_tile_sw128<kBM, kD, kThreads>(sQ + buf * Tr::kQBytes, gq, ld, m * kBM, T, tid);
    load_tile_sw128<kBM, kD, kThreads>(sdO + buf * Tr::kQBytes, gdo, ldo, m * kBM, T, tid);
    for (int i = tid; i < kBM; i += kThreads) {
      const int q = m * kBM + i;
      cp_async_4(sL + buf * kBM + i, glse + (q < T ? q : 0), q < T);
      cp_async_4(sDs + buf * kBM + i, gdsum + (q < T ? q : 0), q < T);
    }
  };
  load_tile_sw128<kBN, kD, kThreads>(sK, gk, ld, n0, T, tid);
  load_tile_sw128<kBN, kD, kThreads>(sV, gv, ld, n0, T, tid);
  load_q_tile(m_lo, 0);
  cp_async_commit();

  float dv[kD / 2], dk[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) dv[i] = dk[i] = 0.f;
  const float sl2 = p.softmax_scale * 1.4426950408889634f;  // scale·log2(e)
  constexpr float kLog2e = 1.4426950408889634f;
  const int key0 = n0 + 64 * wg + 16 * warp + g;  // this thread's keys: key0 and key0 + 8
  const uint32_t k_addr = smem_addr(sK), v_addr = smem_addr(sV), ds_addr = smem_addr(sdS);
  const uint32_t kw_off = uint32_t(64 * wg * 128);  // this warpgroup's 64 key rows inside each K / V sub-tile
  // this warpgroup's dQ columns wg·kDqN .. +kDqN-1: sub-tile and byte offset inside its rows
  const uint32_t dq_b_off = uint32_t((wg * kDqN) / 64 * (kBN * 128) + (wg * kDqN) % 64 * 2);

  for (int m = m_lo; m < m_hi; ++m) {
    const int buf = (m - m_lo) & 1, q0 = m * kBM;
    cp_async_wait<0>();  // this query tile (issued one iteration ago) has landed
    fence_proxy_async();
    __syncthreads();  // ... for every thread; every warpgroup is done with the other stage and with sdS
    if (m + 1 < m_hi) load_q_tile(m + 1, buf ^ 1);
    cp_async_commit();
    const uint32_t q_addr = smem_addr(sQ + buf * Tr::kQBytes), do_addr = smem_addr(sdO + buf * Tr::kQBytes);

    // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ: 64 keys x kBM queries per warpgroup, K-major operands.
    float st[kBM / 2], dpt[kBM / 2];
    wgmma_fence();
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_ss<0, 0, kBM>(st, make_desc(k_addr + sub * kBN * 128 + kw_off + kk * 32, 16, 1024),
                            make_desc(q_addr + sub * kBM * 128 + kk * 32, 16, 1024), sub + kk > 0);
#pragma unroll
    for (int sub = 0; sub < kSub; ++sub)
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_ss<0, 0, kBM>(dpt, make_desc(v_addr + sub * kBN * 128 + kw_off + kk * 32, 16, 1024),
                            make_desc(do_addr + sub * kBM * 128 + kk * 32, 16, 1024), sub + kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(st);
    fence_regs(dpt);

    // Pᵀ = exp(scale·Sᵀ - L) (0 where masked) and dSᵀ = Pᵀ o (dPᵀ - D), per (key row, query column).
    const bool need_mask = (kCausal && n0 + kBN - 1 > q0) || q0 + kBM > T || n0 + kBN > T;
    const float* sLb = sL + buf * kBM;
    const float* sDb = sDs + buf * kBM;
#pragma unroll
    for (int j = 0; j < kBM / 8; ++j) {
      const float2 l2 = *reinterpret_cast<const float2*>(sLb + 8 * j + 2 * t);
      const float2 dd = *reinterpret_cast<const float2*>(sDb + 8 * j + 2 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float lq = (e & 1) ? l2.y : l2.x, dq = (e & 1) ? dd.y : dd.x;
        float pv = exp2_fast(fmaf(st[4 * j + e], sl2, -lq * kLog2e));
        if (need_mask) {
          const int key = key0 + (e >> 1) * 8, q = q0 + 8 * j + 2 * t + (e & 1);
          if (q >= T || key >= T || (kCausal && key > q)) pv = 0.f;
        }
        st[4 * j + e] = pv;
        dpt[4 * j + e] = pv * (dpt[4 * j + e] - dq);
      }
    }
    uint32_t pa[kBM / 16][4], da[kBM / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        pa[kk][i] = pack_bf16(st[8 * kk + 2 * i], st[8 * kk + 2 * i + 1]);
        da[kk][i] = pack_bf16(dpt[8 * kk + 2 * i], dpt[8 * kk + 2 * i + 1]);
      }
    }
    // dSᵀ -> shared (rows: keys of the tile; columns: queries), bf16 pairs. A fragment register i of k-step kk holds
    // row g + 8 (i % 2), columns 16 kk + 8 (i / 2) + 2t, +1, i.e. 16-byte chunk 2kk + i/2, bytes 4t.
    {
      const int r0 = 64 * wg + 16 * warp + g;
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = r0 + 8 * (i & 1);
          *reinterpret_cast<uint32_t*>(sdS + sw128_offset(r, 2 * kk + (i >> 1)) + 4 * t) = da[kk][i];
        }
    }

    // dV += Pᵀ dO and dK += dSᵀ Q: A from registers, dO and Q N-major.
    fence_regs(dv);
    fence_regs(dk);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
      wgmma_rs<1, kD>(dv, pa[kk], make_desc(do_addr + kk * 2048, kBM * 128, 1024), true);
#pragma unroll
    for (int kk = 0; kk < kBM / 16; ++kk)
      wgmma_rs<1, kD>(dk, da[kk], make_desc(q_addr + kk * 2048, kBM * 128, 1024), true);
    wgmma_commit();

    // dQ[:, this warpgroup's columns] = dS K over the kBN keys: dSᵀ from shared (M-major A), K N-major.
    fence_proxy_async();
    __syncthreads();  // every warpgroup's dSᵀ is in shared memory
    float dq[kDqN / 2];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk)
      wgmma_ss<1, 1, kDqN>(dq, make_desc(ds_addr + kk * 2048, kBM * 128, 1024),
                           make_desc(k_addr + dq_b_off + kk * 2048, kBN * 128, 1024), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(dv);
    fence_regs(dk);
    fence_regs(dq);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = q0 + 16 * warp + g + 8 * r;
      if (q < T) {
        float* dst = gdq + int64_t(q) * kD + wg * kDqN + 2 * t;
#pragma unroll
        for (int j = 0; j < kDqN / 8; ++j)
          atomicAdd(reinterpret_cast<float2*>(dst + 8 * j), make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]));
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: dK = scale · dSᵀ Q, dV, rows key0 and key0 + 8, in the gradients' dtype.
  const int64_t doff = int64_t(b) * p.dqkv_batch_stride + int64_t(h) * p.dqkv_head_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= T) continue;
    const int64_t ro = doff + int64_t(key) * p.dqkv_row_stride;
    if (p.dqkv_f32) {
      float* gk_ = static_cast<float*>(p.dk) + ro;
      float* gv_ = static_cast<float*>(p.dv) + ro;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<float2*>(gk_ + 8 * j + 2 * t) =
            make_float2(dk[4 * j + 2 * r] * p.softmax_scale, dk[4 * j + 2 * r + 1] * p.softmax_scale);
        *reinterpret_cast<float2*>(gv_ + 8 * j + 2 * t) = make_float2(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    } else {
      bf16* gk_ = static_cast<bf16*>(p.dk) + ro;
      bf16* gv_ = static_cast<bf16*>(p.dv) + ro;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(gk_ + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dk[4 * j + 2 * r] * p.softmax_scale, dk[4 * j + 2 * r + 1] * p.softmax_scale);
        *reinterpret_cast<__nv_bfloat162*>(gv_ + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
      }
    }
  }
}

}  // namespace trainer::flash::sm90
