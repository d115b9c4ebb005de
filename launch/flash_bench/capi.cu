// C entry points over kernels/flash_attn for the GPU check-and-benchmark script (launch/flash_bench/bench.py, which
// loads this as a shared library through ctypes and compares against PyTorch on the same device), plus tile-config
// variants that are compiled only here, for choosing the production configuration (launch.cuh Config) by measurement.
// Built by launch/flash_bench/build.sh; needs no MPI, OpenBLAS or JSON library.
#include "common.cuh"  // first (fmt set-up for nvcc)

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "flash_attn/flash.h"
#include "flash_attn/launch.cuh"

#include "../bench_fatal.h"  // CUDA_CHECK's fatal path

using namespace trainer;
using namespace trainer::flash;

namespace {

void fill(FlashParams& p, const void* qkv, void* out, float* lse, int B, int T, int H, int d, int causal, int bf16,
          int o_f32, float scale) {
  const int64_t D = int64_t(H) * d, es = bf16 ? 2 : 4;
  p.q = qkv;
  p.k = static_cast<const char*>(qkv) + D * es;
  p.v = static_cast<const char*>(qkv) + 2 * D * es;
  p.o = out;
  p.lse = lse;
  p.qkv_batch_stride = int64_t(T) * 3 * D, p.qkv_row_stride = 3 * D, p.qkv_head_stride = d;
  p.o_batch_stride = int64_t(T) * D, p.o_row_stride = D, p.o_head_stride = d;
  p.batch = B, p.seq_len = T, p.num_heads = H, p.d_head = d;
  p.softmax_scale = scale, p.causal = causal != 0, p.is_bf16 = bf16 != 0, p.o_f32 = o_f32 != 0;
}

AttnShape shape(int B, int T, int H, int d, int causal) {
  AttnShape s;
  s.B = B, s.T = T, s.H = H, s.d_head = d, s.causal = causal != 0;
  return s;
}

/// Device memory for the production forward's split partials, kept across calls (grown on a first, untimed call).
void* fwd_workspace(size_t bytes) {
  static void* p = nullptr;
  static size_t have = 0;
  if (bytes > have) {
    if (p) CUDA_CHECK(cudaFree(p));
    CUDA_CHECK(cudaMalloc(&p, bytes));
    have = bytes;
  }
  return p;
}

/// True when the traits' element type is the problem's input dtype.
template <class Tr>
bool dtype_fits(const FlashParams& p) {
  return p.is_bf16 == std::is_same_v<typename Tr::Elt, __nv_bfloat16>;
}

template <class Tr>
bool fwd_variant(const FlashParams& p, cudaStream_t s) {
  if (p.d_head != Tr::kD || !dtype_fits<Tr>(p)) return false;
  if (p.causal)
    launch_fwd<Tr, true>(p, s);
  else
    launch_fwd<Tr, false>(p, s);
  return true;
}
template <class Dkdv, class Dq>
bool bwd_variant(const FlashBwdParams& p, cudaStream_t s) {
  if (p.d_head != Dkdv::kD || !dtype_fits<Dkdv>(p)) return false;
  if (p.causal)
    launch_bwd<Dkdv, Dq, true>(p, s);
  else
    launch_bwd<Dkdv, Dq, false>(p, s);
  return true;
}

}  // namespace

extern "C" {

/// Forward. variant 0: the production path (run_fwd); others: explicit tile configurations (see the switch); plus
/// 100 G: the CTA order's tile group G (0: the launcher's).
/// Returns 0, -1 on an exception (printed), -2 when the variant does not fit (d_head, dtype).
int fa_fwd(int variant, const void* qkv, void* out, float* lse, int B, int T, int H, int d, int causal, int bf16,
           int o_f32, float scale, void* stream) {
  try {
    FlashParams p;
    fill(p, qkv, out, lse, B, T, H, d, causal, bf16, o_f32, scale);
    p.tile_group = variant / 100;  // variant + 100 G: CTA order with tile group G (params.h, tile_coord)
    variant %= 100;
    auto s = static_cast<cudaStream_t>(stream);
    bool ok = true;
    switch (variant) {
      case 0: {  // as Backend::attention_fwd: split keys where the problem has few query tiles
        const AttnShape sh = shape(B, T, H, d, causal);
        const size_t ws = fwd_workspace_bytes(sh, bf16 ? DType::bf16 : DType::f32);
        bind_fwd_workspace(p, sh, bf16 ? DType::bf16 : DType::f32, ws ? fwd_workspace(ws) : nullptr, ws);
        run_fwd(p, s);
        break;
      }
      case 1: ok = fwd_variant<FwdTraits<64, 128, 64, true, 2>>(p, s); break;
      case 2: ok = fwd_variant<FwdTraits<64, 64, 64, true>>(p, s); break;
      case 3: ok = fwd_variant<FwdTraits<64, 128, 128, true>>(p, s); break;
      case 4: ok = fwd_variant<FwdTraits<128, 64, 64, false>>(p, s); break;
      case 5: ok = fwd_variant<FwdTraits<128, 128, 32, false>>(p, s); break;
      case 6: ok = fwd_variant<FwdTraits<128, 64, 64, true>>(p, s); break;
      // two m16 row tiles per warp (K/V fragments reused twice)
      case 7: ok = fwd_variant<FwdTraits<64, 128, 64, true, 1, 2>>(p, s); break;
      case 8: ok = fwd_variant<FwdTraits<64, 128, 64, false, 1, 2>>(p, s); break;
      case 9: ok = fwd_variant<FwdTraits<128, 128, 64, false, 1, 2>>(p, s); break;
      case 10: ok = fwd_variant<FwdTraits<128, 128, 32, false, 1, 2>>(p, s); break;
      case 11: ok = fwd_variant<FwdTraits<64, 64, 64, true, 1, 2>>(p, s); break;
      // d 80 (xl: 4 x 32 heads, T 512 / 2048); production Config<80>::Fwd was FwdTraits<80, 128, 64, false> when
      // these were added and is variant 21 since (launch.cuh)
      // (8 warps x 1 m16 tile, Q from shared memory). FwdTraits<kD, kBM queries, kBN keys, Q in registers,
      // min CTAs per SM, m16 tiles per warp>.
      case 20: ok = fwd_variant<FwdTraits<80, 64, 64, true>>(p, s); break;          // 4 warps x 1, Q regs
      case 21: ok = fwd_variant<FwdTraits<80, 128, 64, true, 1, 2>>(p, s); break;   // 4 warps x 2, Q regs
      case 22: ok = fwd_variant<FwdTraits<80, 128, 32, false, 1, 2>>(p, s); break;  // 4 warps x 2, kBN 32
      case 23: ok = fwd_variant<FwdTraits<80, 64, 64, false>>(p, s); break;         // 4 warps x 1, Q smem
      case 24: ok = fwd_variant<FwdTraits<80, 64, 32, true>>(p, s); break;          // 4 warps x 1, kBN 32
      case 25: ok = fwd_variant<FwdTraits<80, 128, 32, true, 1, 2>>(p, s); break;   // 4 warps x 2, kBN 32, Q regs
      case 26: ok = fwd_variant<FwdTraits<80, 64, 64, true, 1, 2>>(p, s); break;    // 2 warps x 2, Q regs
      case 27: ok = fwd_variant<FwdTraits<80, 128, 64, true>>(p, s); break;         // the old tiles, Q regs
      // d 128 (issue target: 16 x 128, T 16384, causal forward >= 300 TFLOP/s); production was variant 10, is 31 now
      // (variant 10 stays as the few-CTA configuration)
      case 30: ok = fwd_variant<FwdTraits<128, 256, 32, false, 1, 2>>(p, s); break;  // 8 warps x 2: K/V reused 16x
      case 31: ok = fwd_variant<FwdTraits<128, 256, 64, false, 1, 2>>(p, s); break;
      case 32: ok = fwd_variant<FwdTraits<128, 64, 32, false, 1, 2>>(p, s); break;   // 2 warps x 2
      case 33: ok = fwd_variant<FwdTraits<128, 192, 32, false, 1, 2>>(p, s); break;  // 6 warps x 2
      case 34: ok = fwd_variant<FwdTraits<128, 128, 16, false, 1, 2>>(p, s); break;
      // d 96: the mma.sync configuration (launch.cuh Config<96>::Fwd, d 80's tiles), which runs it off Hopper
      case 50: ok = fwd_variant<FwdTraits<96, 128, 64, true, 1, 2>>(p, s); break;
      // fp32 (3xTF32): production Config<64 / 128, true>::Fwd is 40 / 44
      case 40: ok = fwd_variant<FwdTraits<64, 64, 64, false, 1, 1, float>>(p, s); break;
      case 41: ok = fwd_variant<FwdTraits<64, 128, 64, false, 1, 2, float>>(p, s); break;  // 4 warps x 2
      case 42: ok = fwd_variant<FwdTraits<64, 128, 32, false, 1, 2, float>>(p, s); break;
      case 43: ok = fwd_variant<FwdTraits<64, 64, 32, false, 1, 1, float>>(p, s); break;
      case 44: ok = fwd_variant<FwdTraits<128, 64, 32, false, 1, 1, float>>(p, s); break;
      case 45: ok = fwd_variant<FwdTraits<128, 128, 32, false, 1, 2, float>>(p, s); break;  // 1 CTA per SM
      case 46: ok = fwd_variant<FwdTraits<128, 64, 64, false, 1, 1, float>>(p, s); break;   // 1 CTA per SM
      case 47: ok = fwd_variant<FwdTraits<128, 64, 32, false, 1, 2, float>>(p, s); break;   // 2 warps x 2
      default: ok = false;
    }
    return ok ? 0 : -2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa_fwd: %s\n", e.what());
    return -1;
  }
}

/// Workspace bytes of the backward, for either mask (fa_bwd binds the workspace with the call's mask, and whether
/// the dK/dV pass splits can depend on it; until the twenty-fifth session this sized for causal only).
size_t fa_bwd_ws(int B, int T, int H, int d, int bf16, int deterministic) {
  const DType dt = bf16 ? DType::bf16 : DType::f32;
  return std::max(bwd_workspace_bytes(shape(B, T, H, d, 0), dt, deterministic != 0),
                  bwd_workspace_bytes(shape(B, T, H, d, 1), dt, deterministic != 0));
}

/// Backward. variant 0: production (atomic dQ), 1: production deterministic; others explicit configs; plus 100 G
/// as fa_fwd.
int fa_bwd(int variant, void* dqkv, int dqkv_f32, const void* dout, const void* qkv, const void* out, int o_f32,
           const float* lse, void* ws, int B, int T, int H, int d, int causal, int bf16, float scale, void* stream) {
  try {
    FlashBwdParams p;
    fill(p, qkv, const_cast<void*>(out), const_cast<float*>(lse), B, T, H, d, causal, bf16, o_f32, scale);
    p.tile_group = variant / 100;  // as fa_fwd
    variant %= 100;
    const int64_t D = int64_t(H) * d, es = dqkv_f32 ? 4 : 2;
    p.dout = dout;
    p.dq = dqkv;
    p.dk = static_cast<char*>(dqkv) + D * es;
    p.dv = static_cast<char*>(dqkv) + 2 * D * es;
    p.dqkv_batch_stride = int64_t(T) * 3 * D, p.dqkv_row_stride = 3 * D, p.dqkv_head_stride = d;
    p.dqkv_f32 = dqkv_f32 != 0;
    p.deterministic = variant == 1;
    bind_bwd_workspace(p, shape(B, T, H, d, causal), bf16 ? DType::bf16 : DType::f32, p.deterministic, ws,
                       fa_bwd_ws(B, T, H, d, bf16, p.deterministic));
    auto s = static_cast<cudaStream_t>(stream);
    bool ok = true;
    using Dq64 = BwdDqTraits<64, 64, 64>;
    using Dq128 = BwdDqTraits<128, 64, 32>;
    using Dq80 = BwdDqTraits<80, 64, 32>;  // only instantiated by non-atomic variants (none below)
    using Dq64f = BwdDqTraits<64, 64, 64, 1, float>;  // (the same: atomic variants do not launch it)
    using Dq128f = BwdDqTraits<128, 64, 32, 1, float>;
    switch (variant) {
      case 0:
      case 1: run_bwd(p, s); break;
      case 2: ok = bwd_variant<BwdTraits<64, 64, 64, true>, Dq64>(p, s); break;
      case 3: ok = bwd_variant<BwdTraits<64, 128, 32, true>, Dq64>(p, s); break;
      case 4: ok = bwd_variant<BwdTraits<128, 64, 32, true>, Dq128>(p, s); break;
      case 5: ok = bwd_variant<BwdTraits<128, 128, 64, true>, Dq128>(p, s); break;
      case 6: ok = bwd_variant<BwdTraits<64, 64, 64, false>, BwdDqTraits<64, 128, 64>>(p, s); break;
      // two m16 key tiles per warp (Q/dO fragments reused twice)
      case 7: ok = bwd_variant<BwdTraits<64, 128, 32, true, 1, 2>, Dq64>(p, s); break;
      case 8: ok = bwd_variant<BwdTraits<64, 128, 64, true, 1, 2>, Dq64>(p, s); break;
      case 9: ok = bwd_variant<BwdTraits<64, 64, 32, true, 1, 2>, Dq64>(p, s); break;
      // d 80 (xl), atomic dQ; production Config<80>::Dkdv was BwdTraits<80, 128, 32, true> (8 warps x 16 keys) and
      // is variant 21 since (launch.cuh).
      // BwdTraits<kD, kBN keys per CTA, kBM queries per iteration, atomic dQ, min CTAs per SM, m16 key tiles per
      // warp>; atomic dQ needs warps (kBN / (16 kNT)) a multiple of, and >= the m16 query tiles (kBM / 16).
      case 20: ok = bwd_variant<BwdTraits<80, 64, 32, true>, Dq80>(p, s); break;         // 4 warps x 1
      case 21: ok = bwd_variant<BwdTraits<80, 64, 64, true>, Dq80>(p, s); break;         // 4 warps x 1, kBM 64
      case 22: ok = bwd_variant<BwdTraits<80, 128, 64, true>, Dq80>(p, s); break;        // 8 warps x 1, kBM 64
      case 23: ok = bwd_variant<BwdTraits<80, 64, 32, true, 1, 2>, Dq80>(p, s); break;   // 2 warps x 2
      case 24: ok = bwd_variant<BwdTraits<80, 128, 32, true, 1, 2>, Dq80>(p, s); break;  // 4 warps x 2
      case 25: ok = bwd_variant<BwdTraits<80, 32, 32, true>, Dq80>(p, s); break;         // 2 warps x 1
      case 26: ok = bwd_variant<BwdTraits<80, 128, 16, true>, Dq80>(p, s); break;        // 8 warps x 1, kBM 16
      // d 96: the mma.sync configuration (launch.cuh Config<96>::Dkdv, d 80's tiles), which runs it off Hopper
      case 50: ok = bwd_variant<BwdTraits<96, 64, 64, true>, BwdDqTraits<96, 64, 32>>(p, s); break;
      // fp32 (3xTF32), atomic dQ: production Config<64 / 128, true>::Dkdv is 40 / 44
      case 40: ok = bwd_variant<BwdTraits<64, 64, 32, true, 1, 1, float>, Dq64f>(p, s); break;
      case 41: ok = bwd_variant<BwdTraits<64, 128, 32, true, 1, 2, float>, Dq64f>(p, s); break;  // 4 warps x 2
      case 42: ok = bwd_variant<BwdTraits<64, 64, 64, true, 1, 1, float>, Dq64f>(p, s); break;   // 1 CTA per SM
      case 43: ok = bwd_variant<BwdTraits<64, 64, 16, true, 1, 1, float>, Dq64f>(p, s); break;
      case 44: ok = bwd_variant<BwdTraits<128, 64, 16, true, 1, 1, float>, Dq128f>(p, s); break;
      case 45: ok = bwd_variant<BwdTraits<128, 32, 32, true, 1, 1, float>, Dq128f>(p, s); break;  // 2 warps
      default: ok = false;
    }
    return ok ? 0 : -2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa_bwd: %s\n", e.what());
    return -1;
  }
}

}  // extern "C"
