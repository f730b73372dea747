// The synchronization protocol, in one place: memory-order primitives, the bounded wait every spin
// goes through, the per-CTA peer barrier, and the Lamport buffer rotation. docs/protocol.md draws the
// state machines; the reason for every memory order and buffer count is written beside it here.
#pragma once

#include <cstdint>

#include "common/kernel_params.h"
#include "common/protocol_index.h"

namespace arf::protocol {

// ---- memory-order primitives -----------------------------------------------------------------

// Publishes everything this CTA wrote before the preceding __syncthreads() (release is cumulative
// through bar.sync) to a peer that acquires the same word. .sys scope: the peer may be another GPU.
// 64 bits: a flag word carries the epoch and the writer's call index in one access (flag_word).
__device__ __forceinline__ void st_release_sys(uint64_t* ptr, uint64_t value) {
#if defined(ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
  // Negative control only (cmake/stress.cmake): a bug AITER shipped, a relaxed flag store that no
  // longer publishes the payload. arfusion-stress must detect the corruption.
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
#else
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
#endif
}

// Pairs with st_release_sys: loads after it (and, through the following bar.sync, the CTA's loads)
// observe the peer's data. Plain volatile would not order the payload (vLLM and AITER both had to fix this).
__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* ptr) {
  uint64_t value;
#if defined(ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
  // Negative control only (cmake/stress.cmake): the matching relaxed load (see st_release_sys).
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
#else
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
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

// This rank's call index, read by every wait report. Within a collective kernel it is the kernel's
// own index: call_exit advances it only after every CTA has finished (the reporting CTA has not).
__device__ __forceinline__ uint64_t current_call(const KernelParams& p) {
  return *reinterpret_cast<const volatile uint64_t*>(&p.ctrl->call_index);
}

// Claims the rank's error record (the first failure wins), fills in the details, and raises the
// local abort word so every other wait of this rank gives up at once instead of each row or
// barrier waiting out its own timeout. `code` is kErrorCodeTimeout, kErrorCodeInternal or
// kErrorCodeReleased.
__device__ __forceinline__ void record_failure(const KernelParams& p, int32_t code, int peer,
                                               Phase phase, uint32_t epoch, uint32_t seen_call) {
  atomicExch(&p.ctrl->abort, 1u);
  if (atomicCAS(&p.error->claim, 0, 1) == 0) {
    p.error->rank = p.rank;
    p.error->peer = peer;
    p.error->phase = static_cast<int32_t>(phase);
    p.error->cta = static_cast<int32_t>(blockIdx.x);
    p.error->epoch = epoch;
    p.error->seen_call = seen_call;
    p.error->call = current_call(p);
    // Where the peer was, for the report: a kernel not yet started (peer_entered < call + 1) is a
    // scheduling stall, one that started but never published is a protocol one.
    const ControlBlock* peer_ctrl = peer >= 0 && peer < kMaxRanks ? p.peers.ctrl[peer] : nullptr;
    p.error->peer_entered =
        peer_ctrl ? *reinterpret_cast<const volatile uint64_t*>(&peer_ctrl->calls_entered) : 0;
    p.error->peer_completed =
        peer_ctrl ? *reinterpret_cast<const volatile uint64_t*>(&peer_ctrl->call_index) : 0;
    __threadfence_system();  // the details are visible before the code that announces them
    *reinterpret_cast<volatile int32_t*>(&p.error->code) = code;
  }
}

__device__ __forceinline__ void record_timeout(const KernelParams& p, int peer, Phase phase,
                                               uint32_t epoch) {
  record_failure(p, kErrorCodeTimeout, peer, phase, epoch, 0);
}

// The per-call integrity check failed: `peer` published call `seen_call` where this rank is in
// another call. Reported as arfInternal (a protocol slip is a bug in arfusion, never the caller's).
__device__ __forceinline__ void record_integrity_failure(const KernelParams& p, int peer, Phase phase,
                                                         uint32_t epoch, uint32_t seen_call) {
  record_failure(p, kErrorCodeInternal, peer, phase, epoch, seen_call);
}

// True once any wait of this rank expired. Kernels then do nothing at all — in particular they stop
// pushing data and signalling barriers, which could otherwise satisfy a healthy peer's wait with
// another call's data. The peers then time out too, and every rank reports the failure.
__device__ __forceinline__ bool aborted(const KernelParams& p) {
  return *reinterpret_cast<volatile uint32_t*>(&p.ctrl->abort) != 0u;
}

// True once a peer released this rank's current call (ControlBlock::release_from, written by a
// peer's release kernel: kernels/release_kernel.cuh): the ranks no longer issue the same calls, so
// a wait of this call or a later one would only wait out the bound.
__device__ __forceinline__ bool released(const KernelParams& p) {
  return *reinterpret_cast<const volatile uint64_t*>(&p.ctrl->release_from) <= current_call(p);
}

// Every spin-wait in arfusion goes through here. Returns true once ready() holds; false if the
// timeout expired, a peer released the call, or an earlier wait of this rank already aborted (the
// outputs are then garbage and the host reports the error record: arfTimeout, or arfCommFailed for
// a release). The clock and the release word are read only every 64 polls.
template <typename Ready>
__device__ __forceinline__ bool spin_until(Ready ready, const KernelParams& p, int peer, Phase phase,
                                           uint32_t epoch) {
  if (ready()) return true;
  const uint64_t start = global_timer_ns();
  for (uint32_t polls = 1;; ++polls) {
    if (ready()) return true;
    if ((polls & 63u) == 0) {
      if (*reinterpret_cast<volatile uint32_t*>(&p.ctrl->abort) != 0u) return false;
      if (released(p)) {
        record_failure(p, kErrorCodeReleased, peer, phase, epoch, 0);
        return false;
      }
      if (global_timer_ns() - start > p.timeout_ns) {
        record_timeout(p, peer, phase, epoch);
        return false;
      }
    }
  }
}

// ---- per-CTA peer barrier --------------------------------------------------------------------------

// CTA b of every rank meets CTA b of every peer. Thread i < world signals peer i by writing `epoch`
// (and its call index: flag_word) into the peer's flags[b][my rank] and waits for flags[b][i]
// (written by peer i) to reach `epoch`. Why this is safe:
//  - Same grid on every rank (the plan is rank-symmetric), so CTA b exists everywhere.
//  - Epochs are per CTA and monotonic (ControlBlock::cta_epoch), so consecutive barriers — in one
//    call or across calls with different grids — never alias: no ABA, no reset needed, and a peer
//    one barrier ahead has written epoch+1, which still satisfies ">= epoch".
//  - __syncthreads() before the release makes the whole CTA's prior writes (e.g. copy-in) part of
//    what the release publishes; the acquire plus the closing barrier make them visible to every
//    thread of the waiting CTA.
//  - verify_calls: the flag the wait ended on must hold this call's index (barrier_call_consistent).
// Returns false on all threads if any wait expired or the integrity check failed.
template <int kWorld>
__device__ __forceinline__ bool peer_barrier(const KernelParams& p, uint32_t epoch, Phase phase,
                                             uint32_t call) {
  __syncthreads();
  bool ok = true;
  const int peer = static_cast<int>(threadIdx.x);
  if (peer < kWorld && peer != p.rank) {
    st_release_sys(p.peers.flags[peer] + flag_index(blockIdx.x, p.rank), flag_word(epoch, call));
    const uint64_t* mine = p.peers.flags[p.rank] + flag_index(blockIdx.x, peer);
    uint64_t seen = 0;
    ok = spin_until(
        [&] {
          seen = ld_acquire_sys(mine);
          return epoch_reached(flag_epoch(seen), epoch);
        },
        p, peer, phase, epoch);
    if (ok && p.verify_calls && !barrier_call_consistent(seen, epoch, call)) {
      record_integrity_failure(p, peer, phase, epoch, flag_call(seen));
      ok = false;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// The CTA's barrier epoch is read at kernel entry (enter, below) and written back at exit. Only
// CTA b of this rank touches cta_epoch[b], and consecutive kernels are stream-ordered.
__device__ __forceinline__ void store_cta_epoch(const KernelParams& p, uint32_t epoch) {
  if (threadIdx.x == 0) p.ctrl->cta_epoch[blockIdx.x] = epoch;
}

// ---- call index ------------------------------------------------------------------------------------

// Every collective kernel reads its call index at entry (enter, below) and its CTA 0 notes that the
// call started (calls_entered, read by peers' timeout reports). call_exit advances the index once
// every CTA is done, so a CTA that starts late still reads the kernel's own index.

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

// ---- kernel entry ----------------------------------------------------------------------------------

// What a collective kernel reads of its rank's control block before it touches a peer: the abort
// word, the release word, the call index, the CTA's barrier epoch and (Lamport) the buffer
// rotation. A call a peer released (release_from <= call) counts as aborted: it does nothing. Thread 0 issues
// every load before using any (none depends on another: all three clear sizes are read and one is
// kept), so entry costs one round trip to memory instead of one per field, and one barrier hands
// the values to the CTA, which therefore takes one decision: a CTA whose threads read `abort` at
// different moments could otherwise split at a barrier. Everything but `abort` was written by this
// rank's earlier kernels (stream order, or pdl_wait for a programmatic launch); `abort` is volatile
// because another CTA of this kernel may set it while this one starts (a CTA scheduled late), and
// an abort seen late only delays this CTA's exit to its first wait, which polls it.
struct Entry {
  bool aborted;
  uint64_t call;
  uint32_t cta_epoch;
  LamportState lamport;    // kLamport only
  uint64_t lamport_calls;  // kLamport only
};

template <bool kLamport>
__device__ __forceinline__ Entry enter(const KernelParams& p) {
  __shared__ Entry entry;
  if (threadIdx.x == 0) {
    const ControlBlock* c = p.ctrl;
    const uint32_t abort = *reinterpret_cast<const volatile uint32_t*>(&c->abort);
    const uint64_t release_from = *reinterpret_cast<const volatile uint64_t*>(&c->release_from);
    const uint64_t call = c->call_index;
    const uint32_t epoch = c->cta_epoch[blockIdx.x];
    Entry e;
    if constexpr (kLamport) {
      // Three buffers; two only in the negative-control build (kernel_params.h), where clear2
      // repeats clear1 and is never selected.
      static_assert(kLamportBuffers == 3 || kLamportBuffers == 2, "enter selects among three clear sizes");
      const uint32_t buffer = *reinterpret_cast<const volatile uint32_t*>(&c->lamport_buffer);
      const uint64_t clear0 = c->lamport_clear_elems[0];
      const uint64_t clear1 = c->lamport_clear_elems[1];
      const uint64_t clear2 = c->lamport_clear_elems[kLamportBuffers - 1];
      e.lamport_calls = c->lamport_calls;
      e.lamport.buffer = buffer;
      e.lamport.clear_buffer = lamport_clear_buffer(buffer);
      // Selected, not indexed: a runtime index into a local array would put it on the stack.
      const uint32_t cb = e.lamport.clear_buffer;
      e.lamport.clear_elems = static_cast<int64_t>(cb == 0 ? clear0 : cb == 1 ? clear1 : clear2);
    } else {
      e.lamport = LamportState{};
      e.lamport_calls = 0;
    }
    e.aborted = abort != 0u || release_from <= call;
    e.call = call;
    e.cta_epoch = epoch;
    if (!e.aborted && blockIdx.x == 0) *reinterpret_cast<volatile uint64_t*>(&p.ctrl->calls_entered) = call + 1;
    entry = e;
  }
  __syncthreads();
  return entry;
}

// Called by every CTA of a collective kernel after its last access to the call's protocol state,
// with what the CTA read at entry. The last CTA to arrive advances call_index and, for a Lamport
// call, records how much of the buffer this call used and rotates to the next buffer: plain stores
// of values known since entry (every CTA read the same ones: nothing changes them before this), so
// no load delays the kernel's retirement; a one-CTA grid (a decode step's call) is its own last
// arrival and skips the arrival counter's atomic round trip. The next kernel sees the update
// through stream order (a PDL launch waits for our completion first: pdl.cuh). A kernel whose wait
// gave up does not call this: the communicator has failed and its index stays put.
__device__ __forceinline__ void call_exit(const KernelParams& p, const Entry& e, bool lamport) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (gridDim.x > 1) {
    if (atomicAdd(&p.ctrl->exit_arrivals, 1u) != gridDim.x - 1) return;
    p.ctrl->exit_arrivals = 0;
  }
  if (lamport) {
    p.ctrl->lamport_clear_elems[e.lamport.buffer] = static_cast<uint64_t>(p.num_elems);
    p.ctrl->lamport_buffer = lamport_next_buffer(e.lamport.buffer);
    p.ctrl->lamport_calls = e.lamport_calls + 1;
  }
  p.ctrl->call_index = e.call + 1;
}

// ---- per-call integrity of Lamport calls (verify_calls) -------------------------------------------

// Before pushing: thread 0 writes this CTA's call index into the slot header of every peer, then a
// system fence and the barrier order it before every thread's pushes, so a reader that observes
// any of this CTA's data and then fences sees this header (or a later one).
template <int kWorld>
__device__ __forceinline__ void lamport_publish_header(const KernelParams& p, uint32_t buffer,
                                                       uint32_t call) {
  if (!p.verify_calls) return;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int peer = 0; peer < kWorld; ++peer) {
      if (peer == p.rank) continue;
      *reinterpret_cast<volatile uint32_t*>(
          p.peers.verify[peer] + lamport_header_index(buffer, blockIdx.x, p.rank)) = call;
    }
    __threadfence_system();
  }
  __syncthreads();
}

// After the CTA consumed every row of this call: the header of each source must be this call's.
// Returns false (and records arfInternal) when a peer's data came from another call.
template <int kWorld>
__device__ __forceinline__ bool lamport_check_headers(const KernelParams& p, uint32_t buffer,
                                                      uint32_t call) {
  if (!p.verify_calls) return true;
  __syncthreads();
  bool ok = true;
  const int src = static_cast<int>(threadIdx.x);
  if (src < kWorld && src != p.rank) {
    __threadfence_system();  // pairs with the writer's: our data loads happened before this
    const uint32_t seen = *reinterpret_cast<const volatile uint32_t*>(
        p.peers.verify[p.rank] + lamport_header_index(buffer, blockIdx.x, src));
    if (seen != call) {
      record_integrity_failure(p, src, Phase::kLamportPoll, buffer, seen);
      ok = false;
    }
  }
  return __syncthreads_and(ok) != 0;
}

// ---- shared-device gate ---------------------------------------------------------------------------

// Ranks that share a GPU meet here, in a one-CTA kernel launched just before each collective
// kernel, so that no collective CTA starts spinning while a device mate's earlier kernels on its
// stream (the caller's GEMMs, input writers) have not all finished: a spinning CTA holds its SM,
// and a mate's kernel whose CTAs need a whole SM could then never be scheduled, so the mate's
// collective would never start (a deadlock until the bounded wait expires). Here only one small
// CTA per rank waits, and every rank's collective launches only after every mate has arrived,
// i.e. after every mate's earlier work is done. Thread i < world signals mate i and waits for it,
// as the peer barrier does, on the gate row of the flag words with this rank's gate epoch.
__device__ __forceinline__ bool shared_device_gate(const KernelParams& p) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = p.ctrl->gate_epoch + 1;
  __syncthreads();
  const uint32_t call = static_cast<uint32_t>(current_call(p));
  bool ok = true;
  const int mate = static_cast<int>(threadIdx.x);
  if (mate < kMaxRanks && ((p.device_mates >> mate) & 1u) != 0) {
    st_release_sys(p.peers.flags[mate] + flag_index(kGateRow, p.rank), flag_word(epoch, call));
    const uint64_t* mine = p.peers.flags[p.rank] + flag_index(kGateRow, mate);
    uint64_t seen = 0;
    ok = spin_until(
        [&] {
          seen = ld_acquire_sys(mine);
          return epoch_reached(flag_epoch(seen), epoch);
        },
        p, mate, Phase::kSharedDeviceGate, epoch);
    // A mate passes a gate only with every rank: it is at most one gate ahead, in the next call.
    if (ok && p.verify_calls && !barrier_call_consistent(seen, epoch, call)) {
      record_integrity_failure(p, mate, Phase::kSharedDeviceGate, epoch, flag_call(seen));
      ok = false;
    }
  }
  ok = __syncthreads_and(ok) != 0;
  if (threadIdx.x == 0 && ok) p.ctrl->gate_epoch = epoch;
  return ok;
}

}  // namespace arf::protocol
