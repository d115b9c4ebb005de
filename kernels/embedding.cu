// Token embedding (DESIGN.md: token_embeddings.weight [vocab, d_model]).
//   forward:  out[n, d] = table[tokens[n], d]
//   backward: dtable[v, d] += sum over {n : tokens[n] = v} of dout[n, d], summed in increasing n
// tokens i32 [N]; table [V, D] and out [N, D] f32 or bf16; dtable f32 or bf16 [V, D]; dout f32 or bf16 [N, D].
// The backward avoids atomics (whose order, hence rounding, changes between runs): the (token, n) pairs are sorted
// by token with a stable radix sort (cub::DeviceRadixSort::SortPairs), then one block per run of equal tokens sums
// that run's rows into an fp32 register per column and adds it to dtable once (a bf16 dtable is rounded once per
// element per call: dtable = bf16(f32(dtable) + sum)). Pattern: llm.c `llmc/encoder.cuh`
// (encoder_backward buckets positions by token for a deterministic backward; it buckets on the host, we sort on
// the device so that no host sync is needed).
#include "common.cuh"
#include "embedding.cuh"

#include <cub/device/device_radix_sort.cuh>

namespace trainer::kernels {
namespace {  // ---- kernels ---------------------------------------------------------------------------------------

constexpr int kThreads = 256;

template <class TO, class TT>
__global__ __launch_bounds__(kThreads) void embedding_fwd_kernel(TO* __restrict__ out,
                                                                 const int32_t* __restrict__ tokens,
                                                                 const TT* __restrict__ table, int64_t V, int D) {
  const int64_t n = blockIdx.x;
  const int32_t tok = tokens[n];
  TO* o = out + n * D;
  if (tok < 0 || tok >= V) {
    for (int c = threadIdx.x; c < D; c += blockDim.x) o[c] = from_f32<TO>(NAN);
    return;
  }
  const TT* row = table + int64_t(tok) * D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) o[c] = from_f32<TO>(to_f32(row[c]));
}

__global__ __launch_bounds__(kThreads) void iota_kernel(int32_t* __restrict__ x, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = int32_t(i);
}

// Block i works only if sorted position i starts a run of equal tokens; it then owns dtable's row for that token.
template <class TT, class TD>
__global__ __launch_bounds__(kThreads) void embedding_bwd_kernel(TT* __restrict__ dtable,
                                                                 const int32_t* __restrict__ keys,
                                                                 const int32_t* __restrict__ rows,
                                                                 const TD* __restrict__ dout, int64_t N, int64_t V,
                                                                 int D) {
  const int64_t i = blockIdx.x;
  const int32_t tok = keys[i];
  if (i > 0 && keys[i - 1] == tok) return;
  if (tok < 0 || tok >= V) return;
  int64_t end = i + 1;
  while (end < N && keys[end] == tok) ++end;
  TT* drow = dtable + int64_t(tok) * D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    float acc = 0.f;
    for (int64_t j = i; j < end; ++j) acc += to_f32(dout[int64_t(rows[j]) * D + c]);
    drow[c] = from_f32<TT>(to_f32(drow[c]) + acc);
  }
}

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

size_t cub_temp_bytes(int64_t N) {
  size_t bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), N));
  return bytes;
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------------------------------
void embedding_fwd(void* out, DType tout, const int32_t* tokens, const void* table, DType ttable, int64_t N, int64_t V,
                   int D, cudaStream_t s) {
  if (N <= 0) return;
  dispatch_float(tout, "embedding_fwd out", [&](auto ao) {
    dispatch_float(ttable, "embedding_fwd table", [&](auto at) {
      using TO = typename decltype(ao)::type;
      using TT = typename decltype(at)::type;
      const int threads = D <= 128 ? 64 : (D <= 512 ? 128 : kThreads);
      embedding_fwd_kernel<TO, TT><<<unsigned(N), threads, 0, s>>>(static_cast<TO*>(out), tokens,
                                                                   static_cast<const TT*>(table), V, D);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

size_t embedding_bwd_scratch_bytes(int64_t N, int64_t V) {
  return 3 * align_up(size_t(N) * sizeof(int32_t)) + align_up(cub_temp_bytes(N));
}

void embedding_bwd(void* dtable, DType tdtable, const int32_t* tokens, const void* dout, DType tdout, int64_t N,
                   int64_t V, int D, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  if (N <= 0) return;
  TRAINER_CHECK(scratch_bytes >= embedding_bwd_scratch_bytes(N, V), "embedding_bwd: scratch of {} bytes is too small",
                scratch_bytes);
  char* base = static_cast<char*>(scratch);
  const size_t a = align_up(size_t(N) * sizeof(int32_t));
  int32_t* keys_out = reinterpret_cast<int32_t*>(base);
  int32_t* rows_in = reinterpret_cast<int32_t*>(base + a);
  int32_t* rows_out = reinterpret_cast<int32_t*>(base + 2 * a);
  void* temp = base + 3 * a;
  size_t temp_bytes = scratch_bytes - 3 * a;
  iota_kernel<<<elementwise_grid(N, kThreads), kThreads, 0, s>>>(rows_in, N);
  CUDA_CHECK(cudaGetLastError());
  // All 32 key bits: then equal tokens are contiguous even when some are out of range, so no two blocks share a row.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens, keys_out, rows_in, rows_out, N, 0, 32, s));
  dispatch_float(tdtable, "embedding_bwd dtable", [&](auto at) {
    dispatch_float(tdout, "embedding_bwd dout", [&](auto ad) {
      using TT = typename decltype(at)::type;
      using TD = typename decltype(ad)::type;
      const int threads = D <= 128 ? 64 : (D <= 512 ? 128 : kThreads);
      embedding_bwd_kernel<TT, TD><<<unsigned(N), threads, 0, s>>>(static_cast<TT*>(dtable), keys_out, rows_out,
                                                                   static_cast<const TD*>(dout), N, V, D);
    });
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace trainer::kernels
