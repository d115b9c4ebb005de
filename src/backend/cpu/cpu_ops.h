// CPU reference ops: forward and hand-written backward of every op of the Backend interface, as templates on the
// scalar type T (float for CpuBackend, double for the finite-difference tests). Plain loops, except matmul, which is
// OpenBLAS (cblas_sgemm / cblas_dgemm, row-major).
//
// Layouts are those of backend.h (row-major; N = B*T rows, D = d_model = H*dh, F = d_ff, V = vocab):
//   qkv [N, 3D] = [q | k | v], head h of q at columns h*dh .. h*dh+dh-1, of k at D + h*dh, of v at 2D + h*dh
//   out [N, D] (head h at columns h*dh),  lse [B, H, T],  probs [B, H, T, T],  ab [N, 2F] = [a | b]
// Pointers are raw and sizes explicit; the callers (CpuBackend, tests) check shapes and dtypes. Errors: only
// TRAINER_CHECK (RuntimeError) for token/target ids out of range and for an odd d_head in rope.
//
// Contents, top to bottom: matmul (gemm) · embedding · RMSNorm · RoPE · naive attention · FlashAttention-2 tiled
// reference · SwiGLU · add · cross-entropy · reductions · scale · AdamW (fp32, and on bf16 storage).
#pragma once
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/bf16.h"
#include "core/errors.h"

namespace trainer::cpu {

template <class T>
inline constexpr bool kBlasType = std::is_same_v<T, float> || std::is_same_v<T, double>;

// =====================================================================================================================
// matmul
// =====================================================================================================================

/// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op(X) = X or Xᵀ (BLAS xGEMM semantics).
/// A is stored [M,K] (or [K,M] when trans_a) with leading dimension lda (elements between rows), B [K,N] (or [N,K])
/// with ldb, C [M,N] with ldc; strided views (e.g. one head inside qkv, lda = 3D) need no copy.
/// beta = 0 overwrites C without reading it (NaNs in C do not propagate), as BLAS specifies.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  static_assert(kBlasType<T>, "gemm: float or double");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // op(A) op(B) is the zero matrix; BLAS would reject lda = 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  TRAINER_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
                "gemm: dims {}x{}x{} exceed the 32-bit BLAS interface", M, N, K);
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// =====================================================================================================================
// embedding
// =====================================================================================================================

/// out[n, :] = table[tokens[n], :].  tokens [N] i32 in [0, V); table [V, D]; out [N, D].
template <class T>
void embedding_fwd(T* out, const int32_t* tokens, const T* table, int64_t N, int64_t D, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tok = tokens[n];
    TRAINER_CHECK(tok >= 0 && tok < V, "embedding_fwd: token {} at row {} outside the vocabulary [0, {})", tok, n, V);
    std::memcpy(out + n * D, table + int64_t(tok) * D, size_t(D) * sizeof(T));
  }
}

/// dtable[tokens[n], :] += dout[n, :] for every n (accumulates; repeated tokens add up).  dtable [V, D]; dout [N, D].
template <class T>
void embedding_bwd(T* dtable, const int32_t* tokens, const T* dout, int64_t N, int64_t D, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tok = tokens[n];
    TRAINER_CHECK(tok >= 0 && tok < V, "embedding_bwd: token {} at row {} outside the vocabulary [0, {})", tok, n, V);
    T* dst = dtable + int64_t(tok) * D;
    const T* src = dout + n * D;
    for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
  }
}

// =====================================================================================================================
// RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467, eq. 4; DESIGN.md: eps 1e-5, weight w)
// =====================================================================================================================

/// y[n, j] = w[j] * x[n, j] * rstd[n],  rstd[n] = 1 / sqrt(mean_j(x[n, j]^2) + eps).
/// x, y [N, D]; w [D]; rstd [N] kept for backward. The sum of squares accumulates in double.
template <class T>
void rmsnorm_fwd(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t D, double eps) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xr[j]) * double(xr[j]);
    const T r = T(1.0 / std::sqrt(ss / double(D) + eps));
    T* yr = y + n * D;
    for (int64_t j = 0; j < D; ++j) yr[j] = w[j] * xr[j] * r;
    rstd[n] = r;
  }
}

/// Backward of rmsnorm_fwd. With r = rstd[n] and dr/dx_k = -r^3 x_k / D:
///   dx[n, k] += r * w[k] * dy[n, k] - x[n, k] * r^3 / D * sum_j dy[n, j] w[j] x[n, j]   (ACCUMULATES into dx)
///   dw[k]    += sum_n dy[n, k] * x[n, k] * r                                            (accumulates)
/// dy, x, dx [N, D]; w, dw [D]; rstd [N] from rmsnorm_fwd.
template <class T>
void rmsnorm_bwd(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t D) {
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * D;
    const T* dyr = dy + n * D;
    T* dxr = dx + n * D;
    const T r = rstd[n];
    double dot = 0;  // sum_j dy_j w_j x_j
    for (int64_t j = 0; j < D; ++j) dot += double(dyr[j]) * double(w[j]) * double(xr[j]);
    const T c = T(dot * double(r) * double(r) * double(r) / double(D));
    for (int64_t k = 0; k < D; ++k) {
      dxr[k] += r * w[k] * dyr[k] - xr[k] * c;
      dw[k] += dyr[k] * xr[k] * r;
    }
  }
}

// =====================================================================================================================
// RoPE (Su et al. 2021, RoFormer, arXiv:2104.09864, eq. 34; DESIGN.md: theta 10000, pairs (2i, 2i+1))
// =====================================================================================================================

/// Rotates q and k of qkv [B*T, 3D] in place, v untouched. For row n = b*T + t, head h, pair i in [0, dh/2):
///   angle = t * theta^(-2i/dh),  (x0, x1) <- (x0 cos - x1 sin, x0 sin + x1 cos)   on columns h*dh+2i, h*dh+2i+1
/// of q and of k. inverse = true rotates by -angle: the rotation is orthogonal, so its inverse is its transpose and
/// the backward pass of rope is rope(dqkv, inverse = true). Angles are computed in double. dh must be even.
template <class T>
void rope(T* qkv, const AttnShape& s, double theta, bool inverse) {
  const int64_t dh = s.d_head, D = int64_t(s.H) * dh, half = dh / 2;
  TRAINER_CHECK(dh % 2 == 0, "rope: d_head {} is odd", dh);
  std::vector<double> inv_freq(static_cast<size_t>(half), 0.0);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(dh));
  std::vector<T> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(t) * inv_freq[i];
      cs[i] = T(std::cos(a));
      sn[i] = T(inverse ? -std::sin(a) : std::sin(a));
    }
    for (int64_t b = 0; b < s.B; ++b) {
      T* row = qkv + (b * s.T + t) * 3 * D;
      for (int64_t part = 0; part < 2; ++part)  // q, then k
        for (int64_t h = 0; h < s.H; ++h) {
          T* x = row + part * D + h * dh;
          for (int64_t i = 0; i < half; ++i) {
            const T x0 = x[2 * i], x1 = x[2 * i + 1], c = cs[i], sv = sn[i];
            x[2 * i] = x0 * c - x1 * sv;
            x[2 * i + 1] = x0 * sv + x1 * c;
          }
        }
    }
  }
}

// =====================================================================================================================
// Naive softmax attention (Vaswani et al. 2017, arXiv:1706.03762, eq. 1), materialising P [T, T] per (b, h)
// =====================================================================================================================

/// Per batch row b and head h, with Q, K, V [T, dh] the head's slices of qkv:
///   S = scale * Q Kᵀ (+ -inf above the diagonal when causal),  P = softmax_rows(S),  O = P V,
///   lse[b, h, t] = logsumexp_j S[t, j].
/// Writes out [B*T, D] (head h at columns h*dh), lse [B, H, T] and probs [B, H, T, T] (P, zero where masked).
/// QKᵀ and PV are one gemm each, reading q/k/v in place (leading dimension 3D); causal computes the full QKᵀ.
template <class T>
void attention_naive_fwd(const AttnShape& s, T* out, T* lse, T* probs, const T* qkv) {
  const int64_t T_ = s.T, dh = s.d_head, D = int64_t(s.H) * dh, ld = 3 * D;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const T* q = qkv + b * T_ * ld + h * dh;
      const T* k = q + D;
      const T* v = q + 2 * D;
      T* P = probs + (b * s.H + h) * T_ * T_;
      T* L = lse + (b * s.H + h) * T_;
      gemm<T>(false, true, T_, T_, dh, T(s.scale), q, ld, k, ld, T(0), P, T_);  // S = scale Q Kᵀ
      for (int64_t i = 0; i < T_; ++i) {
        T* row = P + i * T_;
        const int64_t n_keys = s.causal ? i + 1 : T_;  // query i sees keys j <= i when causal
        T m = row[0];
        for (int64_t j = 1; j < n_keys; ++j) m = std::max(m, row[j]);
        double sum = 0;
        for (int64_t j = 0; j < n_keys; ++j) {
          row[j] = std::exp(row[j] - m);
          sum += double(row[j]);
        }
        const T inv = T(1.0 / sum);
        for (int64_t j = 0; j < n_keys; ++j) row[j] *= inv;
        for (int64_t j = n_keys; j < T_; ++j) row[j] = T(0);
        L[i] = m + T(std::log(sum));
      }
      gemm<T>(false, false, T_, dh, T_, T(1), P, T_, v, ld, T(0), out + b * T_ * D + h * dh, D);  // O = P V
    }
}

/// Backward of attention_naive_fwd, from the saved P (probs) and dO (dout [B*T, D]):
///   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP - rowsum(P ∘ dP)),  dQ = scale dS K,  dK = scale dSᵀ Q
/// (softmax Jacobian: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)). dqkv [B*T, 3D] is overwritten.
template <class T>
void attention_naive_bwd(const AttnShape& s, T* dqkv, const T* dout, const T* qkv, const T* probs) {
  const int64_t T_ = s.T, dh = s.d_head, D = int64_t(s.H) * dh, ld = 3 * D;
  std::vector<T> dS(static_cast<size_t>(T_ * T_));  // dP, then dS, of one (b, h)
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t off = b * T_ * ld + h * dh;
      const T *q = qkv + off, *k = q + D, *v = q + 2 * D;
      T *dq = dqkv + off, *dk = dq + D, *dv = dq + 2 * D;
      const T* P = probs + (b * s.H + h) * T_ * T_;
      const T* dO = dout + b * T_ * D + h * dh;
      gemm<T>(true, false, T_, dh, T_, T(1), P, T_, dO, D, T(0), dv, ld);          // dV = Pᵀ dO
      gemm<T>(false, true, T_, T_, dh, T(1), dO, D, v, ld, T(0), dS.data(), T_);  // dP = dO Vᵀ
      for (int64_t i = 0; i < T_; ++i) {
        const T* p = P + i * T_;
        T* d = dS.data() + i * T_;
        double rs = 0;
        for (int64_t j = 0; j < T_; ++j) rs += double(p[j]) * double(d[j]);
        for (int64_t j = 0; j < T_; ++j) d[j] = p[j] * (d[j] - T(rs));
      }
      gemm<T>(false, false, T_, dh, T_, T(s.scale), dS.data(), T_, k, ld, T(0), dq, ld);  // dQ = scale dS K
      gemm<T>(true, false, T_, dh, T_, T(s.scale), dS.data(), T_, q, ld, T(0), dk, ld);   // dK = scale dSᵀ Q
    }
}

// =====================================================================================================================
// FlashAttention-2 tiled reference (Dao 2023, arXiv:2307.08691): Algorithm 1 (forward), Algorithm 2 (backward)
// =====================================================================================================================
// The same maths as the naive op without materialising P: queries in tiles of Bq rows, keys in tiles of Bk columns.
// It is the reference the CUDA kernels follow (same tiling, same online softmax, same recomputation), in plain loops.
// Any T (the last tile of each kind may be ragged); causal skips the tiles that lie wholly above the diagonal.
// The K (and V) tile is first copied transposed, [dh, Bk], as a GPU kernel stages it in shared memory: a row of
// S = Q Kᵀ is then a sum of axpys over contiguous keys, which the compiler vectorises (a dot product it would not,
// without reassociating floating-point sums).

/// Xt[d * Bk + c] = X[(c0 + c) * ld + d] for c < nc, d < dh: rows c0.. of one head (leading dimension ld), transposed.
template <class T>
void load_tile_transposed(T* Xt, const T* X, int64_t ld, int64_t c0, int64_t nc, int64_t dh, int64_t Bk) {
  for (int64_t c = 0; c < nc; ++c)
    for (int64_t d = 0; d < dh; ++d) Xt[d * Bk + c] = X[(c0 + c) * ld + d];
}

/// y[c] = sum_d x[d] * Xt[d * Bk + c] for c < nc: one row of x Xᵀ from a transposed tile.
template <class T>
void row_times_tile(T* y, const T* x, const T* Xt, int64_t nc, int64_t dh, int64_t Bk) {
  std::fill(y, y + nc, T(0));
  for (int64_t d = 0; d < dh; ++d) {
    const T xd = x[d];
    const T* xt = Xt + d * Bk;
    for (int64_t c = 0; c < nc; ++c) y[c] += xd * xt[c];
  }
}

/// Forward, Algorithm 1. For each (b, h) and query tile Q_i (rows r0..r1-1), with m = -inf, l = 0, O = 0, and for
/// each key tile j (keys c0..c1-1) not wholly masked:
///   S = scale Q_i K_jᵀ (masked -inf where key > query when causal),  m' = max(m, rowmax(S)),
///   P~ = exp(S - m'),  l = exp(m - m') l + rowsum(P~),  O = diag(exp(m - m')) O + P~ V_j,  m = m'.
/// Then O_i = diag(l)^-1 O and L_i = m + log(l). Writes out [B*T, D] and lse [B, H, T] as attention_naive_fwd does.
template <class T>
void attention_flash2_fwd(const AttnShape& s, T* out, T* lse, const T* qkv, int64_t Bq = 64, int64_t Bk = 64) {
  TRAINER_CHECK(Bq > 0 && Bk > 0, "flash2_fwd: tile sizes {}x{}", Bq, Bk);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t T_ = s.T, dh = s.d_head, D = int64_t(s.H) * dh, ld = 3 * D;
  std::vector<T> S(static_cast<size_t>(Bq * Bk));  // scores, then P~, of one tile [Bq, Bk]
  std::vector<T> O(static_cast<size_t>(Bq * dh));  // unnormalised output accumulator [Bq, dh]
  std::vector<T> m(static_cast<size_t>(Bq)), l(static_cast<size_t>(Bq));  // running row max and row sum [Bq]
  std::vector<T> Kt(static_cast<size_t>(dh * Bk));  // K_j transposed [dh, Bk]
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const T* q = qkv + b * T_ * ld + h * dh;  // row t of Q at q + t*ld
      const T* k = q + D;
      const T* v = q + 2 * D;
      for (int64_t r0 = 0; r0 < T_; r0 += Bq) {
        const int64_t nr = std::min(Bq, T_ - r0);
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), T(0));
        std::fill(O.begin(), O.end(), T(0));
        for (int64_t c0 = 0; c0 < T_; c0 += Bk) {
          if (s.causal && c0 > r0 + nr - 1) break;  // this and all later key tiles are above the diagonal
          const int64_t nc = std::min(Bk, T_ - c0);
          load_tile_transposed(Kt.data(), k, ld, c0, nc, dh, Bk);
          for (int64_t r = 0; r < nr; ++r) {
            T* Sr = S.data() + r * Bk;
            row_times_tile(Sr, q + (r0 + r) * ld, Kt.data(), nc, dh, Bk);  // S = Q_i K_jᵀ, then scale and mask
            T row_max = kNegInf;
            for (int64_t c = 0; c < nc; ++c) {
              Sr[c] = s.causal && c0 + c > r0 + r ? kNegInf : T(s.scale) * Sr[c];
              row_max = std::max(row_max, Sr[c]);
            }
            const T m_new = std::max(m[r], row_max);
            if (m_new == kNegInf) continue;  // row wholly masked so far (cannot happen: key 0 comes first)
            const T alpha = std::exp(m[r] - m_new);  // exp(-inf) = 0 on the first tile
            T row_sum = 0;
            for (int64_t c = 0; c < nc; ++c) {
              Sr[c] = Sr[c] == kNegInf ? T(0) : std::exp(Sr[c] - m_new);  // P~
              row_sum += Sr[c];
            }
            l[r] = alpha * l[r] + row_sum;
            m[r] = m_new;
            T* Or = O.data() + r * dh;
            for (int64_t d = 0; d < dh; ++d) Or[d] *= alpha;
            for (int64_t c = 0; c < nc; ++c) {
              const T p = Sr[c];
              if (p == T(0)) continue;
              const T* vc = v + (c0 + c) * ld;
              for (int64_t d = 0; d < dh; ++d) Or[d] += p * vc[d];
            }
          }
        }
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t t = r0 + r;
          T* o = out + (b * T_ + t) * D + h * dh;
          const T inv_l = T(1) / l[r];
          for (int64_t d = 0; d < dh; ++d) o[d] = O[r * dh + d] * inv_l;
          lse[(b * s.H + h) * T_ + t] = m[r] + std::log(l[r]);
        }
      }
    }
}

/// Backward, Algorithm 2 (recomputation from O and L, no P stored). First D_t = rowsum(dO ∘ O) per query row.
/// Then for each (b, h) and key tile K_j, V_j (dK_j = dV_j = 0), for each query tile i not wholly masked:
///   S = scale Q_i K_jᵀ,  P = exp(S - L_i) (0 where masked),  dV_j += Pᵀ dO_i,  dP = dO_i V_jᵀ,
///   dS = P ∘ (dP - D_i),  dQ_i += scale dS K_j,  dK_j += scale dSᵀ Q_i.
/// dqkv [B*T, 3D] is overwritten; out [B*T, D] and lse [B, H, T] are those of the forward.
template <class T>
void attention_flash2_bwd(const AttnShape& s, T* dqkv, const T* dout, const T* qkv, const T* out, const T* lse,
                          int64_t Bq = 64, int64_t Bk = 64) {
  TRAINER_CHECK(Bq > 0 && Bk > 0, "flash2_bwd: tile sizes {}x{}", Bq, Bk);
  const int64_t T_ = s.T, dh = s.d_head, D = int64_t(s.H) * dh, ld = 3 * D;
  std::vector<T> P(static_cast<size_t>(Bq * Bk)), dS(static_cast<size_t>(Bq * Bk));    // one tile [Bq, Bk]
  std::vector<T> dK(static_cast<size_t>(Bk * dh)), dV(static_cast<size_t>(Bk * dh));    // accumulators [Bk, dh]
  std::vector<T> Kt(static_cast<size_t>(dh * Bk)), Vt(static_cast<size_t>(dh * Bk));  // K_j, V_j transposed [dh, Bk]
  std::vector<T> Drow(static_cast<size_t>(T_));                                         // D = rowsum(dO ∘ O) [T]
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t off = b * T_ * ld + h * dh;
      const T *q = qkv + off, *k = q + D, *v = q + 2 * D;
      T *dq = dqkv + off, *dk = dq + D, *dv = dq + 2 * D;
      const T* O = out + b * T_ * D + h * dh;
      const T* dO = dout + b * T_ * D + h * dh;
      const T* L = lse + (b * s.H + h) * T_;
      for (int64_t t = 0; t < T_; ++t) {  // preprocessing: D = rowsum(dO ∘ O); dQ = 0
        T acc = 0;
        for (int64_t d = 0; d < dh; ++d) acc += dO[t * D + d] * O[t * D + d];
        Drow[t] = acc;
        std::fill(dq + t * ld, dq + t * ld + dh, T(0));
      }
      for (int64_t c0 = 0; c0 < T_; c0 += Bk) {
        const int64_t nc = std::min(Bk, T_ - c0);
        std::fill(dK.begin(), dK.end(), T(0));
        std::fill(dV.begin(), dV.end(), T(0));
        load_tile_transposed(Kt.data(), k, ld, c0, nc, dh, Bk);
        load_tile_transposed(Vt.data(), v, ld, c0, nc, dh, Bk);
        for (int64_t r0 = 0; r0 < T_; r0 += Bq) {
          const int64_t nr = std::min(Bq, T_ - r0);
          if (s.causal && r0 + nr - 1 < c0) continue;  // every query of this tile is before every key
          for (int64_t r = 0; r < nr; ++r) {  // P = exp(scale Q Kᵀ - L), dS = P ∘ (dO Vᵀ - D)
            T *Pr = P.data() + r * Bk, *dSr = dS.data() + r * Bk;
            row_times_tile(Pr, q + (r0 + r) * ld, Kt.data(), nc, dh, Bk);    // S
            row_times_tile(dSr, dO + (r0 + r) * D, Vt.data(), nc, dh, Bk);  // dP
            const T Lr = L[r0 + r], Dr = Drow[r0 + r];
            for (int64_t c = 0; c < nc; ++c) {
              const bool masked = s.causal && c0 + c > r0 + r;
              Pr[c] = masked ? T(0) : std::exp(T(s.scale) * Pr[c] - Lr);
              dSr[c] = Pr[c] * (dSr[c] - Dr);
            }
          }
          for (int64_t r = 0; r < nr; ++r) {  // dV += Pᵀ dO, dK += scale dSᵀ Q, dQ += scale dS K
            const T *qr = q + (r0 + r) * ld, *dor = dO + (r0 + r) * D;
            T* dqr = dq + (r0 + r) * ld;
            for (int64_t c = 0; c < nc; ++c) {
              const T p = P[r * Bk + c], ds = T(s.scale) * dS[r * Bk + c];
              if (p == T(0)) continue;  // masked or underflowed: dS = P ∘ (...) is 0 as well
              T *dvc = dV.data() + c * dh, *dkc = dK.data() + c * dh;
              const T* kc = k + (c0 + c) * ld;
              for (int64_t d = 0; d < dh; ++d) {
                dvc[d] += p * dor[d];
                dkc[d] += ds * qr[d];
                dqr[d] += ds * kc[d];
              }
            }
          }
        }
        for (int64_t c = 0; c < nc; ++c) {  // write dK_j, dV_j
          std::copy(dK.begin() + c * dh, dK.begin() + (c + 1) * dh, dk + (c0 + c) * ld);
          std::copy(dV.begin() + c * dh, dV.begin() + (c + 1) * dh, dv + (c0 + c) * ld);
        }
      }
    }
}

// =====================================================================================================================
// SwiGLU (Shazeer 2020, arXiv:2002.05202, eq. 6: FFN = W2 (silu(W1 x) ⊙ W3 x)); silu(a) = a σ(a)
// =====================================================================================================================

/// g[n, f] = silu(a) * b with a = ab[n, f], b = ab[n, F + f].  ab [N, 2F]; g [N, F].
template <class T>
void swiglu_fwd(T* g, const T* ab, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    const T *a = ab + n * 2 * F, *bb = a + F;
    T* gr = g + n * F;
    for (int64_t f = 0; f < F; ++f) {
      const T sig = T(1) / (T(1) + std::exp(-a[f]));
      gr[f] = a[f] * sig * bb[f];
    }
  }
}

/// dab [N, 2F] (overwritten) = [dg * b * silu'(a) | dg * silu(a)],  silu'(a) = σ(a) (1 + a (1 - σ(a))).
/// g [N, F] (optional; may alias dg) = silu(a) * b, written after dg's element is read.
template <class T>
void swiglu_bwd(T* dab, const T* dg, const T* ab, int64_t N, int64_t F, T* g = nullptr) {
  for (int64_t n = 0; n < N; ++n) {
    const T *a = ab + n * 2 * F, *bb = a + F, *dgr = dg + n * F;
    T *da = dab + n * 2 * F, *db = da + F;
    for (int64_t f = 0; f < F; ++f) {
      const T sig = T(1) / (T(1) + std::exp(-a[f]));
      const T d = dgr[f];
      da[f] = d * bb[f] * sig * (T(1) + a[f] * (T(1) - sig));
      db[f] = d * a[f] * sig;
      if (g) g[n * F + f] = a[f] * sig * bb[f];
    }
  }
}

// =====================================================================================================================
// elementwise, cross-entropy, reductions
// =====================================================================================================================

/// x[i] += y[i], i < n.
template <class T>
void add_inplace(T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

/// Per row n of logits [N, V]: losses[n] = logsumexp(logits[n]) - logits[n, targets[n]] (max-subtracted, sum of
/// exponentials in double). If dlogits is non-null: dlogits[n] = dscale * (softmax(logits[n]) - onehot(targets[n])),
/// the gradient of dscale * sum_n losses[n]. dlogits may alias logits (each row is read fully before it is written).
template <class T>
void cross_entropy(T* losses, T* dlogits, const T* logits, const int32_t* targets, int64_t N, int64_t V,
                   double dscale) {
  for (int64_t n = 0; n < N; ++n) {
    const T* l = logits + n * V;
    const int32_t y = targets[n];
    TRAINER_CHECK(y >= 0 && y < V, "cross_entropy: target {} at row {} outside the vocabulary [0, {})", y, n, V);
    T m = l[0];
    for (int64_t j = 1; j < V; ++j) m = std::max(m, l[j]);
    double sum = 0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(double(l[j]) - double(m));
    const double lse = double(m) + std::log(sum);
    losses[n] = T(lse - double(l[y]));
    if (!dlogits) continue;
    T* dl = dlogits + n * V;
    for (int64_t j = 0; j < V; ++j) dl[j] = T(dscale * std::exp(double(l[j]) - lse));
    dl[y] -= T(dscale);
  }
}

/// sum_i x[i], accumulated in double.
template <class T>
double sum(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]);
  return s;
}

/// sum_i x[i]^2, accumulated in double (for the global gradient norm).
template <class T>
double sum_squares(const T* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

/// x[i] *= a, i < n.
template <class T>
void scale(T* x, int64_t n, T a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

// =====================================================================================================================
// AdamW (Loshchilov & Hutter 2019, arXiv:1711.05101, Alg. 2, in the course's form; DESIGN.md)
// =====================================================================================================================

/// The per-step constants of adamw in T, each computed in double and rounded once: alpha_t = lr * sqrt(1 - b2^t) /
/// (1 - b1^t), decay = lr * wd, b1, b2, 1 - b1, 1 - b2, eps, grad_scale.
template <class T>
struct AdamWConsts {
  T alpha_t, decay, b1, b2, omb1, omb2, eps, gs;
  explicit AdamWConsts(const AdamWArgs& a) {
    const double t = double(a.t);
    alpha_t = T(a.lr * std::sqrt(1.0 - std::pow(a.beta2, t)) / (1.0 - std::pow(a.beta1, t)));
    decay = T(a.lr * a.weight_decay);
    b1 = T(a.beta1);
    b2 = T(a.beta2);
    omb1 = T(1.0 - a.beta1);
    omb2 = T(1.0 - a.beta2);
    eps = T(a.eps);
    gs = T(a.grad_scale);
  }
};

/// One element of adamw (the formula below), in T; p, m, v updated in place.
template <class T>
inline void adamw_element(T& p, T g, T& m, T& v, const AdamWConsts<T>& c) {
  const T gi = g * c.gs;
  p -= c.decay * p;
  m = c.b1 * m + c.omb1 * gi;
  v = c.b2 * v + c.omb2 * gi * gi;
  p -= c.alpha_t * m / (std::sqrt(v) + c.eps);
}

/// One step over p, g, m, v [n], t = a.t (1-based):
///   g' = grad_scale * g;  p -= lr * wd * p;  m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2;
///   p -= alpha_t * m / (sqrt(v) + eps),  alpha_t = lr * sqrt(1 - b2^t) / (1 - b1^t)   (alpha_t in double).
template <class T>
void adamw(T* p, const T* g, T* m, T* v, int64_t n, const AdamWArgs& a) {
  const AdamWConsts<T> c(a);
  for (int64_t i = 0; i < n; ++i) adamw_element(p[i], g[i], m[i], v[i], c);
}

/// adamw on bf16 storage (bits as uint16_t): each element loaded to fp32, adamw_element<float>, then p, m, v rounded
/// to bf16 once each, to nearest even, or p stochastically with the random bits of element index a.index_offset + i
/// (a.stochastic_rounding; backend/bf16.h).
inline void adamw_bf16(uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v, int64_t n, const AdamWArgs& a) {
  const AdamWConsts<float> c(a);
  const uint64_t key = bf16_bits::rounding_key(a.seed, a.t);
  for (int64_t i = 0; i < n; ++i) {
    float pi = bf16_bits::to_f32(p[i]), mi = bf16_bits::to_f32(m[i]), vi = bf16_bits::to_f32(v[i]);
    adamw_element(pi, bf16_bits::to_f32(g[i]), mi, vi, c);
    p[i] = a.stochastic_rounding
               ? bf16_bits::from_f32_stochastic(pi, bf16_bits::rounding_bits(key, a.index_offset + i))
               : bf16_bits::from_f32(pi);
    m[i] = bf16_bits::from_f32(mi);
    v[i] = bf16_bits::from_f32(vi);
  }
}

}  // namespace trainer::cpu
