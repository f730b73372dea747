// The synchronization protocol, in one place: memory-order primitives, the bounded wait every spin
// goes through, the per-CTA peer barrier, and the Lamport buffer rotation. docs/protocol.md draws the
// state machines; the reason for every memory order and buffer count is written beside it here.
#pragma once

#include <cstdint>

#include "arfusion/arfusion.h"
#include "kernels/kernel_params.h"
#include "kernels/protocol_index.h"

namespace arf::protocol {

// ---- memory-order primitives -----------------------------------------------------------------

// Publishes everything this CTA wrote before the preceding __syncthreads() (release is cumulative
// through bar.sync) to a peer that acquires the same word. .sys scope: the peer may be another GPU.
__device__ __forceinline__ void st_release_sys(uint32_t* ptr, uint32_t value) {
#if defined(ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
  // Negative control only (cmake/stress.cmake): AITER #2890's bug, a relaxed flag store that no
  // longer publishes the payload. arfusion-stress must detect the corruption.
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
#else
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
#endif
}

// Pairs with st_release_sys: loads after it (and, through the following bar.sync, the CTA's loads)
// observe the peer's data. Plain volatile would not order the payload (vLLM PR #2760, AITER #2890).
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t* ptr) {
  uint32_t value;
#if defined(ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
  // Negative control only (cmake/stress.cmake): the matching relaxed load (see st_release_sys).
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
#else
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
#endif
  return value;
}

// A 16-byte load that bypasses L1 and is never hoisted out of a loop: for memory that peers write
// while we read (Lamport slots) or wrote in this kernel (scatter/gather inboxes, pull buffers).
__device__ __forceinline__ uint4 ld_volatile_v4(const void* ptr) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- bounded waits -------------------------------------------------------------------------------

// Records the first expired wait (rank, peer, phase, CTA, epoch) in the host-mapped error record and
// raises the local abort word, so every other wait of this rank gives up at once instead of each
// row or barrier waiting out its own timeout.
__device__ __forceinline__ void record_timeout(const KernelParams& p, int peer, Phase phase,
                                               uint32_t epoch) {
  atomicExch(&p.ctrl->abort, 1u);
  if (atomicCAS(&p.error->claim, 0, 1) == 0) {
    p.error->rank = p.rank;
    p.error->peer = peer;
    p.error->phase = static_cast<int32_t>(phase);
    p.error->cta = static_cast<int32_t>(blockIdx.x);
    p.error->epoch = epoch;
    __threadfence_system();  // the details are visible before the code that announces them
    *reinterpret_cast<volatile int32_t*>(&p.error->code) = static_cast<int32_t>(arfTimeout);
  }
}

// True once any wait of this rank expired. Kernels then do nothing at all — in particular they stop
// pushing data and signalling barriers, which could otherwise satisfy a healthy peer's wait with
// another call's data. The peers then time out too, and every rank reports the failure.
__device__ __forceinline__ bool aborted(const KernelParams& p) {
  return *reinterpret_cast<volatile uint32_t*>(&p.ctrl->abort) != 0u;
}

// Every spin-wait in arfusion goes through here. Returns true once ready() holds; false if the
// timeout expired or an earlier wait of this rank already aborted (the outputs are then garbage and
// the host reports arfTimeout from the error record). The clock is read only every 64 polls.
template <typename Ready>
__device__ __forceinline__ bool spin_until(Ready ready, const KernelParams& p, int peer, Phase phase,
                                           uint32_t epoch) {
  if (ready()) return true;
  const uint64_t start = global_timer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (ready()) return true;
    if ((polls & 63u) == 0) {
      if (*reinterpret_cast<volatile uint32_t*>(&p.ctrl->abort) != 0u) return false;
      if (global_timer_ns() - start > p.timeout_ns) {
        record_timeout(p, peer, phase, epoch);
        return false;
      }
    }
  }
}

// ---- per-CTA peer barrier --------------------------------------------------------------------------

// CTA b of every rank meets CTA b of every peer. Thread i < world signals peer i by writing `epoch`
// into the peer's flags[b][my rank] and waits for flags[b][i] (written by peer i) to reach `epoch`.
// Why this is safe:
//  - Same grid on every rank (the plan is rank-symmetric), so CTA b exists everywhere.
//  - Epochs are per CTA and monotonic (ControlBlock::cta_epoch), so consecutive barriers — in one
//    call or across calls with different grids — never alias: no ABA, no reset needed, and a peer
//    one barrier ahead has written epoch+1, which still satisfies ">= epoch".
//  - __syncthreads() before the release makes the whole CTA's prior writes (e.g. copy-in) part of
//    what the release publishes; the acquire plus the closing barrier make them visible to every
//    thread of the waiting CTA.
// Returns false on all threads if any wait expired.
template <int kWorld>
__device__ __forceinline__ bool peer_barrier(const KernelParams& p, uint32_t epoch, Phase phase) {
  __syncthreads();
  bool ok = true;
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < kWorld && peer != p.rank) {
    st_release_sys(p.peers.flags[peer] + flag_index(blockIdx.x, p.rank), epoch);
    const uint32_t* mine = p.peers.flags[p.rank] + flag_index(blockIdx.x, peer);
    ok = spin_until([&] { return epoch_reached(ld_acquire_sys(mine), epoch); }, p, peer, phase, epoch);
  }
  return __syncthreads_and(ok) != 0;
}

// The CTA's barrier epoch at kernel entry (thread 0 reads, all threads get it) and its write-back at
// exit. Only CTA b of this rank touches cta_epoch[b], and consecutive kernels are stream-ordered.
__device__ __forceinline__ uint32_t load_cta_epoch(const KernelParams& p) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = p.ctrl->cta_epoch[blockIdx.x];
  __syncthreads();
  return epoch;
}
__device__ __forceinline__ void store_cta_epoch(const KernelParams& p, uint32_t epoch) {
  if (threadIdx.x == 0) p.ctrl->cta_epoch[blockIdx.x] = epoch;
}

// ---- Lamport buffers ---------------------------------------------------------------------------------

// Three buffers: while a rank reads buffer b (call k), the buffer of call k-1 is being cleared by the
// rank itself, and a peer that already finished call k (it can be at most one call ahead: finishing
// k needed our push of k) may be pushing call k+1 into the third. Two would let that early push land
// in a buffer we are still reading or clearing. No barrier is needed: a slot is readable exactly when
// it holds no -0.0 (pushed data is canonicalised to +0.0), and it is cleared only after we read it.
struct LamportState {
  uint32_t buffer;             // read this call
  uint32_t clear_buffer;       // read last call; cleared now
  int64_t clear_elems;         // per-slot elements the last call wrote into it
};

__device__ __forceinline__ LamportState load_lamport_state(const KernelParams& p) {
  LamportState s;
  s.buffer = *reinterpret_cast<volatile uint32_t*>(&p.ctrl->lamport_buffer);
  s.clear_buffer = lamport_clear_buffer(s.buffer);
  s.clear_elems = static_cast<int64_t>(p.ctrl->lamport_clear_elems[s.clear_buffer]);
  return s;
}

// Called by every CTA after its last access to the Lamport state of this call. The last CTA to
// arrive records how much of the buffer this call used and rotates to the next buffer; the next
// kernel sees the update through stream order (a PDL launch must not start before this — see
// docs/protocol.md).
__device__ __forceinline__ void lamport_arrive(const KernelParams& p, const LamportState& s) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (atomicAdd(&p.ctrl->lamport_arrivals, 1u) == gridDim.x - 1) {
      p.ctrl->lamport_arrivals = 0;
      p.ctrl->lamport_clear_elems[s.buffer] = static_cast<uint64_t>(p.num_elems);
      p.ctrl->lamport_buffer = lamport_next_buffer(s.buffer);
      p.ctrl->lamport_calls += 1;
    }
  }
}

}  // namespace arf::protocol
