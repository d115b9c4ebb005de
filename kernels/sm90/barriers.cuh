// Synchronisation of warp-specialized Hopper (sm_90a) kernels, as inline PTX (PTX ISA 8.x, "mbarrier", "bar",
// "setmaxnreg"): mbarriers (a producer's stages: full by TMA transaction bytes or arrivals, empty by the consumers'
// arrivals), named barriers (hand-offs between warpgroups) and register reallocation between warpgroups.
// An mbarrier completes a phase when its expected number of arrivals (and transaction bytes) has arrived; waiting
// names the phase by its parity (the first phase is 0; waiting on parity 1 of a fresh barrier returns at once, which
// lets a producer treat every stage as free before its first use).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"  // smem_addr

namespace trainer::sm90 {

/// Initializes the mbarrier at `bar` (shared, 8-byte aligned) to expect `count` arrivals per phase. One thread, then
/// a CTA barrier before any use.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/// After a thread's mbar_init calls (before the CTA barrier that publishes them): makes the initialised barriers
/// visible to the async proxy (TMA transaction bytes, cp.async arrivals), as CUTLASS's fence_barrier_init does.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival of this thread (release semantics: its earlier memory accesses happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/// One arrival of this thread when all of its earlier cp.async copies have landed (cp.async.mbarrier.arrive.noinc:
/// the barrier's expected count must include this arrival).
__device__ __forceinline__ void mbar_arrive_cp_async(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/// Waits until the phase of parity `parity` of the mbarrier at `bar` has completed (acquire semantics).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}
/// Named barrier `id` (1..15; 0 is __syncthreads) of `count` threads (a multiple of 32): sync waits until count
/// threads have arrived or synced on it; arrive counts this thread in and goes on (PTX "bar.sync / bar.arrive"). Every
/// warp of a participating warpgroup executes it.
__device__ __forceinline__ void named_bar_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(uint32_t id, uint32_t count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
/// Register reallocation between warpgroups (every warp of the warpgroup executes it): this warpgroup's threads
/// give up registers down to / take registers up to kRegs (a multiple of 8, 24..256).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
/// One arrival on `bar` that also expects `bytes` more transaction bytes in the current phase (a TMA producer,
/// before its copies).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

}  // namespace trainer::sm90
