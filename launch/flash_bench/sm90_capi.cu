// C entry points over the Hopper (sm_90a, wgmma) FlashAttention kernels for launch/flash_bench/sm90_check.py:
// tile-configuration variants compiled only here, checked against float64 PyTorch and timed beside the production
// kernels (libflashbench.so) and SDPA. Built by launch/flash_bench/build.sh (SM90_ONLY=1 rebuilds just these).
#include "common.cuh"  // first (fmt set-up for nvcc)

#include "flash_attn/launch_sm90.cuh"

using namespace trainer::flash;

namespace {
/// The variant's launcher (launch_sm90.cuh, as production), or -2 when it does not fit the head dimension.
template <class Tr>
int fwd_variant(const FlashParams& p, cudaStream_t s) {
  if (p.d_head != Tr::kD || !p.is_bf16) return -2;
  bool_switch(p.causal, [&](auto c) { sm90::launch_fwd<Tr, decltype(c)::value>(p, s); });
  return 0;
}
template <class Tr>
int bwd_variant(const FlashBwdParams& p, cudaStream_t s) {
  if (p.d_head != Tr::kD) return -2;
  bool_switch(p.causal, [&](auto c) { sm90::launch_bwd<Tr, decltype(c)::value>(p, s); });
  return 0;
}
}  // namespace

extern "C" {
/// Forward variants (sm90::FwdTraits); -2 when the variant does not fit.
int fa_fwd_sm90(int variant, const void* qkv, void* out, float* lse, int B, int T, int H, int d, int causal, int o_f32,
                float scale, void* stream) {
  FlashParams p;
  const int64_t D = int64_t(H) * d;
  p.q = qkv;
  p.k = static_cast<const char*>(qkv) + D * 2;
  p.v = static_cast<const char*>(qkv) + 2 * D * 2;
  p.o = out;
  p.lse = lse;
  p.qkv_batch_stride = int64_t(T) * 3 * D, p.qkv_row_stride = 3 * D, p.qkv_head_stride = d;
  p.o_batch_stride = int64_t(T) * D, p.o_row_stride = D, p.o_head_stride = d;
  p.batch = B, p.seq_len = T, p.num_heads = H, p.d_head = d;
  p.softmax_scale = scale, p.causal = causal != 0, p.is_bf16 = true, p.o_f32 = o_f32 != 0;
  auto s = static_cast<cudaStream_t>(stream);
  // FwdTraits<d, keys per tile, consumer warpgroups, K / V stages, producer / consumer registers, intra-warpgroup
  // overlap (O), ping-pong (P), persistent, O's rescale skipped where it is a multiply by 1>. Production: 9 (d 64),
  // 24 (d 80), 34 (d 96) and 18 (d 128), sm90.cu Sm90Config (6 and 16, with every rescale, until v39); 0, 20, 32
  // and 10 (13 with ping-pong) are the loops with one CTA a query tile (production until v22). The earlier design
  // (all threads loading by cp.async, CTA barriers) is recorded in results/h200/2026-12-01/v5_sm90 and
  // v7_ws/experiments; the overlap / ping-pong comparison in results/h200/2026-12-02/v14.
  switch (variant) {
    case 0: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 24, 160, true, true>>(p, s);    // O + P
    case 1: return fwd_variant<sm90::FwdTraits<64, 128, 3, 3, 24, 160, true, true>>(p, s);    // three K / V stages
    case 2: return fwd_variant<sm90::FwdTraits<64, 128, 2, 2, 24, 240>>(p, s);                // two consumers
    case 3: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 24, 160>>(p, s);                // no overlap
    // persistent (one CTA per SM taking query tiles from a counter, FwdTileCounter): production since v22
    case 6: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 24, 160, true, true, true>>(p, s);
    case 15: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, false, true>>(p, s);
    case 24: return fwd_variant<sm90::FwdTraits<80, 128, 3, 2, 24, 160, false, false, true>>(p, s);
    case 34: return fwd_variant<sm90::FwdTraits<96, 128, 3, 2, 24, 160, false, false, true>>(p, s);
    // the same with 32 producer registers (three consumers: 128 x (32 + 3 x 160) = 65536): no spill of the
    // producer's at 24 (60-80 bytes), the same time (results/h200/2026-12-03/v22/call1)
    case 7: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 32, 160, true, true, true>>(p, s);
    case 25: return fwd_variant<sm90::FwdTraits<80, 128, 3, 2, 32, 160, false, false, true>>(p, s);
    case 35: return fwd_variant<sm90::FwdTraits<96, 128, 3, 2, 32, 160, false, false, true>>(p, s);
    // persistent with the loops that were not faster one CTA a tile: ping-pong at d 128 (13; persistent, 16, it is
    // 1-2% faster: production until v39, now with the skip below, 18) and d 80 (23; two consumers: slower), three
    // K / V stages (1, 14: no gain), v22 call4-5
    case 16: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, true, true>>(p, s);
    case 17: return fwd_variant<sm90::FwdTraits<128, 128, 2, 3, 24, 240, true, false, true>>(p, s);
    case 8: return fwd_variant<sm90::FwdTraits<64, 128, 3, 3, 24, 160, true, true, true>>(p, s);
    case 26: return fwd_variant<sm90::FwdTraits<80, 128, 2, 2, 24, 240, true, true, true>>(p, s);
    // 6, 16, 24, 34 with O's rescale skipped where a warp's running maxima did not move (kSkipUnitRescale: the same
    // bits): production at d 64 (9) and 128 (18) since v39; at d 80 (27) 0.6-1.4% slower, d 96 (36) not timed
    // (results/h100/2026-12-06/v39)
    case 9: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 24, 160, true, true, true, true>>(p, s);
    case 18: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, true, true, true>>(p, s);
    case 27: return fwd_variant<sm90::FwdTraits<80, 128, 3, 2, 24, 160, false, false, true, true>>(p, s);
    case 36: return fwd_variant<sm90::FwdTraits<96, 128, 3, 2, 24, 160, false, false, true, true>>(p, s);
    case 4: return fwd_variant<sm90::FwdTraits<64, 128, 3, 2, 24, 160, true, false>>(p, s);   // O
    case 5: return fwd_variant<sm90::FwdTraits<64, 128, 2, 2, 24, 240, true, true>>(p, s);    // O + P, 2 consumers
    case 10: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, false>>(p, s);  // O
    case 11: return fwd_variant<sm90::FwdTraits<128, 64, 3, 2, 24, 160>>(p, s);   // three consumers, 64 keys
    case 12: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240>>(p, s);  // no overlap
    case 13: return fwd_variant<sm90::FwdTraits<128, 128, 2, 2, 24, 240, true, true>>(p, s);   // O + P
    case 14: return fwd_variant<sm90::FwdTraits<128, 128, 2, 3, 24, 240, true, false>>(p, s);  // O, three stages
    case 20: return fwd_variant<sm90::FwdTraits<80, 128, 3, 2, 24, 160>>(p, s);   // d 80: three consumers
    case 21: return fwd_variant<sm90::FwdTraits<80, 128, 2, 2, 24, 240>>(p, s);   // d 80: two consumers
    case 23: return fwd_variant<sm90::FwdTraits<80, 128, 2, 2, 24, 240, true, true>>(p, s);   // O + P, 2 consumers
    case 30: return fwd_variant<sm90::FwdTraits<96, 128, 2, 2, 24, 240, true, false>>(p, s);  // d 96: O
    case 31: return fwd_variant<sm90::FwdTraits<96, 128, 2, 2, 24, 240>>(p, s);               // no overlap
    case 32: return fwd_variant<sm90::FwdTraits<96, 128, 3, 2, 24, 160>>(p, s);   // three consumers
    case 33: return fwd_variant<sm90::FwdTraits<96, 128, 2, 2, 24, 240, true, true>>(p, s);   // O + P
    default: return -2;
  }
}

/// Backward variants (sm90::BwdTraits<d, query stages, producer / consumer registers>), bf16 in and out; ws:
/// B*H*T*(d + 1) floats (dq_accum, then dsum). out / lse from a forward. -2 when the variant does not fit.
/// Production: 7 (d 64), 20 (d 80), 31 (d 96) and 10 (d 128), sm90.cu Sm90Config. The warp-specialized design's development
/// variants (one to three cp.async loader warps, dQ per warpgroup over its own keys) and the previous design (CTA
/// barriers) are recorded in results/h200/2026-12-01/v7_ws/ and kernels/flash_attn/NOTES.md ("warp specialization").
int fa_bwd_sm90(int variant, void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse,
                float* ws, int B, int T, int H, int d, int causal, float scale, void* stream) {
  FlashBwdParams p;
  const int64_t D = int64_t(H) * d;
  p.q = qkv;
  p.k = static_cast<const char*>(qkv) + D * 2;
  p.v = static_cast<const char*>(qkv) + 2 * D * 2;
  p.o = const_cast<void*>(out);
  p.lse = const_cast<float*>(lse);
  p.qkv_batch_stride = int64_t(T) * 3 * D, p.qkv_row_stride = 3 * D, p.qkv_head_stride = d;
  p.o_batch_stride = int64_t(T) * D, p.o_row_stride = D, p.o_head_stride = d;
  p.batch = B, p.seq_len = T, p.num_heads = H, p.d_head = d;
  p.softmax_scale = scale, p.causal = causal != 0, p.is_bf16 = true, p.o_f32 = false;
  p.dout = dout;
  p.dq = dqkv;
  p.dk = static_cast<char*>(dqkv) + D * 2;
  p.dv = static_cast<char*>(dqkv) + 2 * D * 2;
  p.dqkv_batch_stride = int64_t(T) * 3 * D, p.dqkv_row_stride = 3 * D, p.dqkv_head_stride = d;
  p.dqkv_f32 = false;
  p.dq_accum = ws;
  p.dsum = ws + int64_t(B) * H * T * d;
  auto s = static_cast<cudaStream_t>(stream);
  switch (variant) {
    case 0: return bwd_variant<sm90::BwdTraits<64, 2, 40, 232>>(p, s);    // d 64 until v20: 64-query tiles
    case 1: return bwd_variant<sm90::BwdTraits<64, 3, 40, 232>>(p, s);    // three query stages
    case 2: return bwd_variant<sm90::BwdTraits<64, 2, 24, 240>>(p, s);    // consumer registers 240
    // 128-query tiles (dQ rows per consumer, bf16 Pᵀ in dS, L / D read where used), one dQ stage; 7: production
    // d 64 (results/h200/2026-12-03/v20: 16 heads, T 16384, causal 3.01-3.17 ms against variant 0's 3.54-3.56, 6's
    // 3.25; V held in registers as dPᵀ's A operand, not kept: 3.16-3.19)
    case 6: return bwd_variant<sm90::BwdTraits<64, 2, 40, 232, 128, 1>>(p, s);
    case 7: return bwd_variant<sm90::BwdTraits<64, 2, 24, 240, 128, 1>>(p, s);
    case 10: return bwd_variant<sm90::BwdTraits<128, 2, 24, 240>>(p, s);  // production d 128
    case 20: return bwd_variant<sm90::BwdTraits<80, 2, 40, 232>>(p, s);   // d 80 with d 64's budget
    case 21: return bwd_variant<sm90::BwdTraits<80, 2, 24, 240>>(p, s);   // d 80, consumer registers 240
    case 11: return bwd_variant<sm90::BwdTraits<128, 2, 40, 232>>(p, s);  // 232 regs: spills, serialized wgmma
    case 30: return bwd_variant<sm90::BwdTraits<96, 2, 24, 240>>(p, s);   // d 96 with d 128's budget
    case 31: return bwd_variant<sm90::BwdTraits<96, 2, 40, 232>>(p, s);   // d 96 with d 64's budget (production)
    // CTA order (tile_coord): production groups kTileGroup (16) heads; 1 = each head's key tiles in turn (the order
    // before the sixteenth session); 1 << 20 = every head's first key tile before any second one
    case 4: p.tile_group = 1; return bwd_variant<sm90::BwdTraits<64, 2, 40, 232>>(p, s);
    case 5: p.tile_group = 1 << 20; return bwd_variant<sm90::BwdTraits<64, 2, 40, 232>>(p, s);
    case 24: p.tile_group = 1; return bwd_variant<sm90::BwdTraits<80, 2, 40, 232>>(p, s);
    case 25: p.tile_group = 1 << 20; return bwd_variant<sm90::BwdTraits<80, 2, 40, 232>>(p, s);
    case 14: p.tile_group = 1; return bwd_variant<sm90::BwdTraits<128, 2, 24, 240>>(p, s);
    case 15: p.tile_group = 1 << 20; return bwd_variant<sm90::BwdTraits<128, 2, 24, 240>>(p, s);
    default: return -2;
  }
}
}  // extern "C"
