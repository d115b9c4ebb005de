// Host side of FlashAttention-2: validation, dispatch and the Tensor-level wrappers (see flash.h).
// STYLE.md section 3: check shapes, strides and alignment before launching (flash-attention `flash_api.cpp`,
// CHECK_SHAPE), then turn the runtime flags into template parameters (bool_switch).
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "flash_attn/flash.h"
#include "flash_attn/launch.h"
#include "backend/cuda_sizes.h"

#include <cmath>
#include <type_traits>

namespace trainer::flash {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

void check_common(const FlashParams& p) {
  TRAINER_CHECK(supports_head_dim(p.d_head), "flash2: d_head {} not supported (16, 32, 64, 80, 96, 128)", p.d_head);
  TRAINER_CHECK(p.batch >= 0 && p.seq_len >= 0 && p.num_heads >= 0 && p.batch <= 65535 && p.num_heads <= 65535,
                "flash2: batch {} heads {} seq {} out of range", p.batch, p.num_heads, p.seq_len);
  // grid limits of tile_grid: y = tiles per (b, h) pair (16 rows at least), z = groups of tile_group pairs
  TRAINER_CHECK(p.seq_len <= 16 * 65535 && int64_t(p.batch) * p.num_heads <= int64_t(65535) * tile_group(p),
                "flash2: seq {} (at most {}) or batch x heads {} (at most {}) too large for the grid", p.seq_len,
                16 * 65535, int64_t(p.batch) * p.num_heads, int64_t(65535) * tile_group(p));
  TRAINER_CHECK(p.softmax_scale > 0.f && std::isfinite(p.softmax_scale), "flash2: softmax_scale {} must be > 0",
                p.softmax_scale);
  TRAINER_CHECK(p.q && p.k && p.v && p.o && p.lse, "flash2: null q/k/v/o/lse");
  TRAINER_CHECK(p.is_bf16 || p.o_f32, "flash2: f32 inputs need an f32 output");
  const int chunk = p.is_bf16 ? 8 : 4;  // elements per 16 bytes: cp.async moves 16-byte chunks of a row
  TRAINER_CHECK(aligned(p.q, 16) && aligned(p.k, 16) && aligned(p.v, 16), "flash2: q/k/v not 16-byte aligned");
  TRAINER_CHECK(p.qkv_row_stride % chunk == 0 && p.qkv_batch_stride % chunk == 0 && p.qkv_head_stride % chunk == 0,
                "flash2: q/k/v strides ({}, {}, {}) not multiples of {} elements", p.qkv_batch_stride,
                p.qkv_row_stride, p.qkv_head_stride, chunk);
  TRAINER_CHECK(aligned(p.o, p.o_f32 ? 8 : 4) && p.o_row_stride % 2 == 0 && p.o_batch_stride % 2 == 0 &&
                    p.o_head_stride % 2 == 0,
                "flash2: out pointer or strides not aligned for pair stores");
}

/// Calls f(std::integral_constant<int, d_head>{}) for a supported head dimension (checked before).
template <class F>
auto head_dim_switch(int d_head, F&& f) {
  switch (d_head) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 80: return f(std::integral_constant<int, 80>{});
    case 96: return f(std::integral_constant<int, 96>{});
    default: return f(std::integral_constant<int, 128>{});
  }
}

/// True when the dK/dV pass splits its query loop for this problem (launch_bwd / bwd_sm90_launch, dkdv_chunk) and
/// so needs the dK/dV accumulators (the same decision the launcher makes: same kernel, tiles, mask and device).
bool bwd_dkdv_splits(const AttnShape& s, DType dtype) {
  const int64_t bh = int64_t(s.B) * s.H;
  if (dtype == DType::bf16 && uses_sm90_bwd(s.d_head))
    return dkdv_chunk(int(s.T), kSm90BwdKeyTile, sm90_bwd_query_rows(s.d_head), bh, s.causal, true) > 0;
  return head_dim_switch(s.d_head, [&](auto d) {
    return dtype == DType::f32 ? bwd_dkdv_chunk<d, true>(int(s.T), bh, s.causal) > 0
                               : bwd_dkdv_chunk<d, false>(int(s.T), bh, s.causal) > 0;
  });
}

/// True when the deterministic backward of a problem (bf16 or not, d_head) runs the Hopper kernel with its dQ
/// contributions in key-tile order (FlashBwdParams::dq_ordered: the atomic mode's dq_accum and tile words, never the
/// dK/dV accumulators); else it is the mma.sync kernels' dK/dV pass and dQ pass (the workspace holds D only).
bool ordered_dq(bool bf16, int d_head) { return bf16 && uses_sm90_bwd(d_head); }

}  // namespace

bool supports_head_dim(int d) { return cuda_sizes::flash_supports_head_dim(d); }  // backend/cuda_sizes.h

void run_fwd(const FlashParams& p, cudaStream_t s) {
  check_common(p);
  if (p.batch == 0 || p.seq_len == 0 || p.num_heads == 0) return;
  bool_switch(p.causal, [&](auto c) {
    bool_switch(!p.is_bf16, [&](auto f32) {
      head_dim_switch(p.d_head, [&](auto d) { fwd_launch<d, decltype(c)::value, decltype(f32)::value>(p, s); });
    });
  });
}

void run_bwd(const FlashBwdParams& p, cudaStream_t s) {
  check_common(p);
  TRAINER_CHECK(p.dout && p.dq && p.dk && p.dv && p.dsum, "flash2 bwd: null dout/dq/dk/dv/dsum");
  TRAINER_CHECK(p.is_bf16 || p.dqkv_f32, "flash2 bwd: f32 inputs need f32 gradients");
  const bool dq_pass = p.deterministic && !ordered_dq(p.is_bf16, p.d_head);  // the mma.sync kernels' dQ pass
  TRAINER_CHECK(dq_pass || (p.dq_accum && aligned(p.dq_accum, 16)),
                "flash2 bwd: dq_accum null or not 16-byte aligned (atomic mode and the Hopper backward's bulk "
                "reduction)");
  TRAINER_CHECK(!p.dkv_accum || aligned(p.dkv_accum, 16), "flash2 bwd: dkv_accum not 16-byte aligned");
  const int chunk = p.is_bf16 ? 8 : 4;  // dout rows are read in 16-byte chunks like q, k, v
  TRAINER_CHECK(aligned(p.dout, 16) && p.o_row_stride % chunk == 0 && p.o_batch_stride % chunk == 0 &&
                    p.o_head_stride % chunk == 0,
                "flash2 bwd: dout not 16-byte aligned rows");
  TRAINER_CHECK(aligned(p.dq, 8) && aligned(p.dk, 8) && aligned(p.dv, 8) && p.dqkv_row_stride % 2 == 0 &&
                    p.dqkv_batch_stride % 2 == 0 && p.dqkv_head_stride % 2 == 0,
                "flash2 bwd: dq/dk/dv not aligned for pair stores");
  if (p.batch == 0 || p.seq_len == 0 || p.num_heads == 0) return;
  bool_switch(p.causal, [&](auto c) {
    bool_switch(!p.is_bf16, [&](auto f32) {
      head_dim_switch(p.d_head, [&](auto d) { bwd_launch<d, decltype(c)::value, decltype(f32)::value>(p, s); });
    });
  });
}

namespace {
/// Key chunks of the forward for this problem (fwd_splits for the mma.sync configuration fwd_launch picks; 1 where
/// it takes the Hopper kernel, which never splits).
int fwd_num_splits(const AttnShape& s, DType dtype) {
  if (dtype == DType::bf16 && uses_sm90_fwd(s.d_head, s.T, s.H, s.B)) return 1;
  const int64_t bh = int64_t(s.B) * s.H;
  return head_dim_switch(s.d_head, [&](auto d) {
    return dtype == DType::f32 ? fwd_splits<d, true>(int(s.T), bh) : fwd_splits<d, false>(int(s.T), bh);
  });
}
}  // namespace

bool uses_sm90_fwd(int d_head, int64_t seq_len, int64_t heads, int64_t batch) {
  return uses_sm90_bwd(d_head) &&
         cuda_sizes::flash_sm90_fwd_enough_tiles(seq_len, heads, batch, d_head, device_sm_count());
}

bool uses_sm90_bwd(int d_head) {
#ifdef TRAINER_SM90
  return cuda_sizes::flash_sm90_head_dim(d_head) && sm90_flash_available();
#else
  return false;
#endif
}

bool sm90_kernels_available() { return uses_sm90_bwd(64); }

bool uses_sm90_kernels(const AttnShape& s, DType dtype, bool backward) {
  if (dtype != DType::bf16) return false;
  return backward ? uses_sm90_bwd(s.d_head) : uses_sm90_fwd(s.d_head, s.T, s.H, s.B);
}

size_t fwd_workspace_bytes(const AttnShape& s, DType dtype) {
  const bool known = dtype == DType::bf16 || dtype == DType::f32;
  if (!known || !supports_head_dim(s.d_head) || s.B * s.H * s.T == 0) return 0;
  const int S = fwd_num_splits(s, dtype);
  if (S <= 1) return 0;
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T);
  return align_up(size_t(S) * rows * size_t(s.d_head) * sizeof(float)) + align_up(size_t(S) * rows * sizeof(float));
}

size_t bwd_workspace_bytes(const AttnShape& s, DType dtype, bool deterministic) {
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T);
  size_t bytes = align_up(rows * sizeof(float));
  if (!deterministic || ordered_dq(dtype == DType::bf16, s.d_head)) {
    bytes += align_up(rows * size_t(s.d_head) * sizeof(float));
    if (!deterministic && bwd_dkdv_splits(s, dtype)) bytes += align_up(2 * rows * size_t(s.d_head) * sizeof(float));
    bytes += align_up(size_t(s.B) * size_t(s.H) * size_t(cuda_sizes::flash_dq_tile_words_per_head(s.T)) *
                      sizeof(unsigned));
  }
  return bytes;
}

void bind_fwd_workspace(FlashParams& p, const AttnShape& s, DType dtype, void* workspace, size_t bytes) {
  const size_t need = fwd_workspace_bytes(s, dtype);
  p.o_accum = p.lse_accum = nullptr;
  if (need == 0) return;
  TRAINER_CHECK(workspace && bytes >= need && aligned(workspace, kAlign),
                "flash2: forward workspace {} bytes at {} (need {}, 256-byte aligned)", bytes, workspace, need);
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T);
  char* base = static_cast<char*>(workspace);
  p.o_accum = reinterpret_cast<float*>(base);
  const size_t splits = size_t(fwd_num_splits(s, dtype));
  p.lse_accum = reinterpret_cast<float*>(base + align_up(splits * rows * size_t(s.d_head) * 4));
}

void bind_bwd_workspace(FlashBwdParams& p, const AttnShape& s, DType dtype, bool deterministic, void* workspace,
                        size_t bytes) {
  const size_t need = bwd_workspace_bytes(s, dtype, deterministic);
  TRAINER_CHECK(workspace && bytes >= need && aligned(workspace, kAlign),
                "flash2: workspace {} bytes at {} (need {}, 256-byte aligned)", bytes, workspace, need);
  const size_t rows = size_t(s.B) * size_t(s.H) * size_t(s.T), dh = size_t(s.d_head);
  char* base = static_cast<char*>(workspace);
  p.dsum = reinterpret_cast<float*>(base);
  p.dq_accum = p.dkv_accum = nullptr;
  p.dq_tile_state = nullptr;
  if (deterministic && !ordered_dq(dtype == DType::bf16, s.d_head)) return;
  size_t off = align_up(rows * 4);
  p.dq_accum = reinterpret_cast<float*>(base + off);
  off += align_up(rows * dh * 4);
  if (!deterministic && bwd_dkdv_splits(s, dtype)) {
    p.dkv_accum = reinterpret_cast<float*>(base + off);
    off += align_up(2 * rows * dh * 4);
  }
  p.dq_tile_state = reinterpret_cast<unsigned*>(base + off);
}

namespace {

/// Fills the layout of FlashParams from the Backend's tensors: qkv [B*T, 3D], out [B*T, D], lse [B, H, T].
void fill_params(FlashParams& p, const AttnShape& s, const Tensor& out, const Tensor& lse, const Tensor& qkv) {
  const int64_t B = s.B, T = s.T, H = s.H, dh = s.d_head, D = H * dh;
  TRAINER_CHECK(qkv.dtype == DType::f32 || qkv.dtype == DType::bf16, "flash2: qkv dtype {}", dtype_name(qkv.dtype));
  TRAINER_CHECK(qkv.rows() == B * T && qkv.cols() == 3 * D, "flash2: qkv {} is not [{}, {}]", qkv.shape_str(), B * T,
                3 * D);
  TRAINER_CHECK(out.rows() == B * T && out.cols() == D && (out.dtype == qkv.dtype || out.dtype == DType::f32),
                "flash2: out {} {} (qkv {})", dtype_name(out.dtype), out.shape_str(), dtype_name(qkv.dtype));
  TRAINER_CHECK(lse.dtype == DType::f32 && lse.numel() == B * H * T, "flash2: lse {} {} is not [{}, {}, {}]",
                dtype_name(lse.dtype), lse.shape_str(), B, H, T);
  const size_t es = dtype_size(qkv.dtype);
  p.q = qkv.data;
  p.k = static_cast<const char*>(qkv.data) + D * es;
  p.v = static_cast<const char*>(qkv.data) + 2 * D * es;
  p.o = out.data;
  p.lse = lse.ptr<float>();
  p.qkv_batch_stride = T * 3 * D, p.qkv_row_stride = 3 * D, p.qkv_head_stride = dh;
  p.o_batch_stride = T * D, p.o_row_stride = D, p.o_head_stride = dh;
  p.batch = s.B, p.seq_len = s.T, p.num_heads = s.H, p.d_head = s.d_head;
  p.softmax_scale = s.scale;
  p.causal = s.causal;
  p.is_bf16 = qkv.dtype == DType::bf16;
  p.o_f32 = out.dtype == DType::f32;
}

}  // namespace

void attention_fwd(const AttnShape& s, Tensor out, Tensor lse, const Tensor& qkv, void* workspace,
                   size_t workspace_bytes, cudaStream_t st) {
  FlashParams p;
  fill_params(p, s, out, lse, qkv);
  bind_fwd_workspace(p, s, qkv.dtype, workspace, workspace_bytes);
  run_fwd(p, st);
}

void attention_bwd(const AttnShape& s, Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                   const Tensor& lse, void* workspace, size_t workspace_bytes, bool deterministic, cudaStream_t st) {
  FlashBwdParams p;
  fill_params(p, s, out, lse, qkv);
  const int64_t B = s.B, T = s.T, H = s.H, dh = s.d_head, D = H * dh;
  TRAINER_CHECK(dqkv.rows() == B * T && dqkv.cols() == 3 * D && (dqkv.dtype == qkv.dtype || dqkv.dtype == DType::f32),
                "flash2: dqkv {} {} (qkv {})", dtype_name(dqkv.dtype), dqkv.shape_str(), dtype_name(qkv.dtype));
  TRAINER_CHECK(dout.rows() == B * T && dout.cols() == D && dout.dtype == qkv.dtype, "flash2: dout {} {} (qkv {})",
                dtype_name(dout.dtype), dout.shape_str(), dtype_name(qkv.dtype));
  const size_t es = dtype_size(dqkv.dtype);
  p.dout = dout.data;
  p.dq = dqkv.data;
  p.dk = static_cast<char*>(dqkv.data) + D * es;
  p.dv = static_cast<char*>(dqkv.data) + 2 * D * es;
  p.dqkv_batch_stride = T * 3 * D, p.dqkv_row_stride = 3 * D, p.dqkv_head_stride = dh;
  p.dqkv_f32 = dqkv.dtype == DType::f32;
  p.deterministic = deterministic;
  bind_bwd_workspace(p, s, qkv.dtype, p.deterministic, workspace, workspace_bytes);
  run_bwd(p, st);
}

}  // namespace trainer::flash
