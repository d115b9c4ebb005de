// Naive (materialised) attention on the CUDA backend: strided-batched cuBLASLt products around the row kernels of
// kernels/attention_naive.cu. Formulas (per batch row b and head h, Q K V [T, d_head] slices of qkv):
//   forward:  S = scale Q Kᵀ (fp32),  P = softmax(S + causal mask) with lse,  O = P V
//   backward: P (stored, or recomputed from lse),  dP = dO Vᵀ (fp32),  dS = P o (dP - rowsum(P o dP)),
//             dQ = scale dS K,  dK = scale dSᵀ Q,  dV = Pᵀ dO          (FlashAttention-2, Dao 2023, section 2.2)
// Layout: qkv [B*T, 3D] with head h of q at columns h*d_head (k at D + h*d_head, v at 2D + h*d_head), so one
// head-batched product per batch row uses lda = 3D and a batch stride of d_head elements. Heads go in chunks whose
// temporaries (fp32 S and dP, plus bf16 copies where needed) fit 256 MiB (cuda_sizes::kNaiveChunkBytes), at least
// one head at a time.
// AttnImpl::flash2 runs kernels/flash_attn where it covers d_head; otherwise this same path (logged once), with probs
// not stored and the backward recomputing P from the saved lse, as FlashAttention does.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "attention_naive.cuh"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda_sizes.h"
#include "flash_attn/flash.h"

namespace trainer {
namespace {

size_t align_up(size_t x) { return cuda_sizes::align256(x); }

/// Heads per chunk so that `per_head` bytes of temporaries per head stay within 256 MiB (at least 1); the scratch
/// sizes come from backend/cuda_sizes.h (which the planner reads) by the same rule.
int heads_per_chunk(size_t per_head, int H) { return cuda_sizes::naive_heads_per_chunk(per_head, H); }

/// Address of element `elements` of t.
char* at(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.data) + elements * int64_t(dtype_size(t.dtype));
}

}  // namespace

void CudaBackend::note_flash2_fallback(AttnImpl impl, int d_head) {
  if (impl != AttnImpl::flash2 || flash2_warned_) return;
  flash2_warned_ = true;
  spdlog::warn("attention: flash2 has no CUDA kernel for d_head {}; using naive attention (probabilities recomputed "
               "in the backward from the logsumexp, not stored)", d_head);
}

void CudaBackend::attention_fwd(AttnImpl impl, const AttnShape& s, Tensor out, Tensor lse, Tensor probs,
                                const Tensor& qkv) {
  ScopedRange range(*this, impl == AttnImpl::flash2 ? "attention_fwd flash2" : "attention_fwd naive", "attention");
  if (impl == AttnImpl::flash2 && flash::supports_head_dim(s.d_head)) {  // kernels/flash_attn (FlashAttention-2)
    const size_t ws = flash::fwd_workspace_bytes(s, qkv.dtype);
    return flash::attention_fwd(s, out, lse, qkv, ws ? scratch(ws) : nullptr, ws, stream_);
  }
  note_flash2_fallback(impl, s.d_head);
  TRAINER_CHECK(qkv.data && out.data && lse.data, "attention_fwd: qkv, out and lse must be given");
  const int64_t B = s.B, T = s.T, H = s.H, dh = s.d_head, D = H * dh;
  const DType tq = qkv.dtype;
  TRAINER_CHECK(tq == DType::f32 || tq == DType::bf16, "attention_fwd: qkv dtype {}", dtype_name(tq));
  TRAINER_CHECK(qkv.rows() == B * T && qkv.cols() == 3 * D, "attention_fwd: qkv {} is not [{}, {}]", qkv.shape_str(),
                B * T, 3 * D);
  TRAINER_CHECK(out.rows() == B * T && out.cols() == D && (out.dtype == tq || out.dtype == DType::f32),
                "attention_fwd: out {} {} (qkv {})", dtype_name(out.dtype), out.shape_str(), dtype_name(tq));
  TRAINER_CHECK(lse.dtype == DType::f32 && lse.numel() == B * H * T, "attention_fwd: lse {} {} is not [{}, {}, {}]",
                dtype_name(lse.dtype), lse.shape_str(), B, H, T);
  const bool store = probs.data != nullptr;
  TRAINER_CHECK(store || impl == AttnImpl::flash2, "attention_fwd: naive attention needs probs [B, H, T, T]");
  if (store)
    TRAINER_CHECK(probs.dtype == tq && probs.numel() == B * H * T * T,
                  "attention_fwd: probs {} {} is not {} [{}, {}, {}, {}]", dtype_name(probs.dtype), probs.shape_str(),
                  dtype_name(tq), B, H, T, T);
  if (B * T == 0 || H == 0) return;

  // Temporaries per head: S fp32 [T, T] (unless it can live in probs: fp32 and stored), P [T, T] when not stored and
  // bf16 (fp32 P is computed in place in S).
  const size_t tt = size_t(T * T);
  const bool s_in_probs = store && tq == DType::f32;
  const bool p_scratch = !store && tq == DType::bf16;
  const size_t per_head = (s_in_probs ? 0 : tt * 4) + (p_scratch ? tt * 2 : 0);
  const int hc = heads_per_chunk(per_head, int(H));
  const size_t bytes = cuda_sizes::naive_attention_fwd_scratch_bytes(s, tq, store);  // the layout below
  char* base = per_head ? static_cast<char*>(scratch(bytes)) : nullptr;
  float* S_scr = reinterpret_cast<float*>(base);
  void* P_scr = base ? base + align_up(size_t(hc) * tt * 4) : nullptr;

  const float alpha_s = s.scale;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h0 = 0; h0 < H; h0 += hc) {
      const int nh = int(std::min<int64_t>(hc, H - h0));
      const int64_t bh = b * H + h0;  // first (batch, head) pair of the chunk
      void* P = store ? at(probs, bh * T * T) : (p_scratch ? P_scr : S_scr);
      float* S = s_in_probs ? static_cast<float*>(P) : S_scr;
      const char* q = at(qkv, b * T * 3 * D + h0 * dh);
      // S = scale Q Kᵀ: [T, dh] x [T, dh]ᵀ, one product per head.
      GemmShape g1;
      g1.M = T, g1.N = T, g1.K = dh, g1.trans_b = true, g1.ab = tq, g1.c = DType::f32;
      g1.lda = 3 * D, g1.ldb = 3 * D, g1.ldc = T;
      g1.batch = nh, g1.stride_a = dh, g1.stride_b = dh, g1.stride_c = T * T;
      {  // sub-ranges of the naive forward (CS336 a2's "softmax against the matmuls" question)
        ScopedRange r(*this, "attention scores QK^T");
        gemm(g1, S, q, q + D * dtype_size(tq), alpha_s, 0.f);
      }
      {
        ScopedRange r(*this, "attention softmax");
        kernels::attn_softmax_fwd(P, tq, lse.ptr<float>() + bh * T, S, nh * T, int(T), s.causal, stream_);
      }
      // O = P V: [T, T] x [T, dh].
      GemmShape g2;
      g2.M = T, g2.N = dh, g2.K = T, g2.ab = tq, g2.c = out.dtype;
      g2.lda = T, g2.ldb = 3 * D, g2.ldc = D;
      g2.batch = nh, g2.stride_a = T * T, g2.stride_b = dh, g2.stride_c = dh;
      ScopedRange r(*this, "attention PV");
      gemm(g2, at(out, b * T * D + h0 * dh), P, q + 2 * D * dtype_size(tq), 1.f, 0.f);
    }
  }
}

void CudaBackend::attention_bwd(AttnImpl impl, const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv,
                                const Tensor& out, const Tensor& lse, const Tensor& probs) {
  ScopedRange range(*this, impl == AttnImpl::flash2 ? "attention_bwd flash2" : "attention_bwd naive", "attention");
  if (impl == AttnImpl::flash2 && flash::supports_head_dim(s.d_head)) {  // kernels/flash_attn (FlashAttention-2)
    const size_t ws = flash::bwd_workspace_bytes(s, qkv.dtype, opts_.deterministic);
    return flash::attention_bwd(s, dqkv, dout, qkv, out, lse, scratch(ws), ws, opts_.deterministic, stream_);
  }
  (void)out;  // rowsum(dO o O) is taken as rowsum(P o dP), which needs no O
  TRAINER_CHECK(dqkv.data && dout.data && qkv.data && lse.data, "attention_bwd: dqkv, dout, qkv and lse must be given");
  const int64_t B = s.B, T = s.T, H = s.H, dh = s.d_head, D = H * dh;
  const DType tq = qkv.dtype;
  TRAINER_CHECK(tq == DType::f32 || tq == DType::bf16, "attention_bwd: qkv dtype {}", dtype_name(tq));
  TRAINER_CHECK(qkv.rows() == B * T && qkv.cols() == 3 * D, "attention_bwd: qkv {} is not [{}, {}]", qkv.shape_str(),
                B * T, 3 * D);
  TRAINER_CHECK(dqkv.rows() == B * T && dqkv.cols() == 3 * D && (dqkv.dtype == tq || dqkv.dtype == DType::f32),
                "attention_bwd: dqkv {} {} (qkv {})", dtype_name(dqkv.dtype), dqkv.shape_str(), dtype_name(tq));
  TRAINER_CHECK(dout.rows() == B * T && dout.cols() == D && dout.dtype == tq, "attention_bwd: dout {} {} (qkv {})",
                dtype_name(dout.dtype), dout.shape_str(), dtype_name(tq));
  TRAINER_CHECK(lse.dtype == DType::f32 && lse.numel() == B * H * T, "attention_bwd: lse {} {}", dtype_name(lse.dtype),
                lse.shape_str());
  const bool stored = probs.data != nullptr;
  TRAINER_CHECK(stored || impl == AttnImpl::flash2, "attention_bwd: naive attention needs the probs of the forward");
  if (stored)
    TRAINER_CHECK(probs.dtype == tq && probs.numel() == B * H * T * T, "attention_bwd: probs {} {}",
                  dtype_name(probs.dtype), probs.shape_str());
  if (B * T == 0 || H == 0) return;

  // Temporaries per head [T, T]: dP fp32 (dS in place when fp32, else a bf16 dS); when P is not stored, S fp32 with P
  // recomputed in place (fp32) or into a bf16 P.
  const size_t tt = size_t(T * T), es = dtype_size(tq);
  const bool bf = tq == DType::bf16;
  const size_t per_head = tt * 4 + (bf ? tt * 2 : 0) + (stored ? 0 : tt * 4 + (bf ? tt * 2 : 0));
  const int hc = heads_per_chunk(per_head, int(H));
  const size_t r32 = align_up(size_t(hc) * tt * 4), r16 = align_up(size_t(hc) * tt * 2);
  char* base = static_cast<char*>(scratch(cuda_sizes::naive_attention_bwd_scratch_bytes(s, tq, stored)));
  float* dP = reinterpret_cast<float*>(base);
  void* dS = bf ? static_cast<void*>(base + r32) : dP;
  char* rec = base + r32 + (bf ? r16 : 0);  // recompute region: S fp32, then bf16 P
  float* S_rec = reinterpret_cast<float*>(rec);
  void* P_rec = bf ? static_cast<void*>(rec + r32) : S_rec;

  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h0 = 0; h0 < H; h0 += hc) {
      const int nh = int(std::min<int64_t>(hc, H - h0));
      const int64_t bh = b * H + h0;
      const char* q = at(qkv, b * T * 3 * D + h0 * dh);
      const char* k = q + D * es;
      const char* v = q + 2 * D * es;
      const char* dO = at(dout, b * T * D + h0 * dh);
      const void* P = stored ? at(probs, bh * T * T) : P_rec;
      if (!stored) {  // S = scale Q Kᵀ, then P = exp(S - lse)
        GemmShape g;
        g.M = T, g.N = T, g.K = dh, g.trans_b = true, g.ab = tq, g.c = DType::f32;
        g.lda = 3 * D, g.ldb = 3 * D, g.ldc = T;
        g.batch = nh, g.stride_a = dh, g.stride_b = dh, g.stride_c = T * T;
        ScopedRange r(*this, "attention recompute P");
        gemm(g, S_rec, q, k, s.scale, 0.f);
        kernels::attn_probs(P_rec, tq, S_rec, lse.ptr<float>() + bh * T, nh * T, int(T), s.causal, stream_);
      }
      // dP = dO Vᵀ: [T, dh] x [T, dh]ᵀ (fp32).
      GemmShape gp;
      gp.M = T, gp.N = T, gp.K = dh, gp.trans_b = true, gp.ab = tq, gp.c = DType::f32;
      gp.lda = D, gp.ldb = 3 * D, gp.ldc = T;
      gp.batch = nh, gp.stride_a = dh, gp.stride_b = dh, gp.stride_c = T * T;
      {
        ScopedRange r(*this, "attention dP = dO V^T");
        gemm(gp, dP, dO, v, 1.f, 0.f);
      }
      {
        ScopedRange r(*this, "attention softmax backward");
        kernels::attn_softmax_bwd(dS, tq, P, tq, dP, nh * T, int(T), s.causal, stream_);
      }
      // dQ = scale dS K ([T, T] x [T, dh]), dK = scale dSᵀ Q, dV = Pᵀ dO; written into dqkv (ld 3D), overwriting.
      GemmShape gd;
      gd.M = T, gd.N = dh, gd.K = T, gd.ab = tq, gd.c = dqkv.dtype;
      gd.lda = T, gd.ldb = 3 * D, gd.ldc = 3 * D;
      gd.batch = nh, gd.stride_a = T * T, gd.stride_b = dh, gd.stride_c = dh;
      char* dq = at(dqkv, b * T * 3 * D + h0 * dh);
      const size_t ec = dtype_size(dqkv.dtype);
      ScopedRange r(*this, "attention dQ dK dV");
      gemm(gd, dq, dS, k, s.scale, 0.f);
      gd.trans_a = true;
      gemm(gd, dq + D * ec, dS, q, s.scale, 0.f);
      GemmShape gv = gd;
      gv.ldb = D;  // dO has row stride D
      gemm(gv, dq + 2 * D * ec, P, dO, 1.f, 0.f);
    }
  }
}

}  // namespace trainer
