// Debug-build stall hooks: make one rank's CTA late at a chosen point of the protocol, so that the
// soak (tools/stress) exercises the skew under which a missing-barrier bug appears — a fast
// rank reusing a buffer that a slow peer has not finished reading — deterministically instead of
// waiting for the scheduler to produce it (FlashInfer tests a compiled-in stall the same way).
//
// Off (the default): every hook is an empty inline function and compiles to nothing.
// On: compile the library with
//   ARF_DEBUG_STALL_NS=<n>      stall length in nanoseconds (spin on %globaltimer; keep it well
//                               below the bounded-wait timeout, or peers report a timeout)
//   ARF_DEBUG_STALL_RANK=<r>    optional: always rank r; default -1 = a rank chosen per (CTA, call,
//                               point) from a hash of the CTA's protocol epoch, so every rank is
//                               the slow one in turn and consecutive calls stall different ranks
//   ARF_DEBUG_STALL_POINTS=<m>  optional bit mask of StallPoint values (default: all)
// cmake/stress.cmake builds such a library variant (arfusion_debug_stall) with its own
// arfusion-stress binary; KernelParams is unchanged.
//
// The choice of rank must be identical on every rank (so exactly one rank of each CTA group is
// late, not zero or two): it depends only on the key — the CTA's barrier epoch, or the Lamport
// call count — which every rank holds with the same value at the same call.
#pragma once

#include <cstdint>

#include "common/kernel_params.h"
#include "kernels/protocol.cuh"

namespace arf::debug {

// Where a hook sits. Each models a different late rank.
enum class StallPoint : uint32_t {
  kBeforePublish = 0,       // before copy-in / scatter / push: peers wait for our data
  kBeforeRead = 1,          // published, synchronized, not yet reading peers: where a missing end barrier bites
  kBeforeCloseBarrier = 2,  // done reading, late to the closing barrier (pull end, twoshot gather)
  kBeforeFinalRead = 3,     // twoshot: past the gather barrier, not yet reading the gather inbox
  kBeforeArrive = 4,        // Lamport: done reading, not yet rotated the buffers
};

#if defined(ARF_DEBUG_STALL_NS)

#ifndef ARF_DEBUG_STALL_RANK
#define ARF_DEBUG_STALL_RANK -1
#endif
#ifndef ARF_DEBUG_STALL_POINTS
#define ARF_DEBUG_STALL_POINTS 0xFFFFFFFFu
#endif

// Rank that stalls at `point` for this key: a mix of key and point, modulo the world.
__device__ __forceinline__ int stall_rank(uint32_t key, StallPoint point, int world) {
  if (ARF_DEBUG_STALL_RANK >= 0) return ARF_DEBUG_STALL_RANK;
  uint32_t h = key * 0x9E3779B1u + static_cast<uint32_t>(point) * 0x85EBCA77u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return static_cast<int>(h % static_cast<uint32_t>(world));
}

// Every thread spins on its own clock read, so no __syncthreads() is needed: a hook may sit where
// only some threads pass (it never does today) without a deadlock.
__device__ __forceinline__ void stall(const KernelParams& p, StallPoint point, uint32_t key) {
  if (p.world <= 1) return;
  if ((static_cast<uint32_t>(ARF_DEBUG_STALL_POINTS) & (1u << static_cast<uint32_t>(point))) == 0) return;
  if (stall_rank(key, point, p.world) != p.rank) return;
  const uint64_t start = protocol::global_timer_ns();
  while (protocol::global_timer_ns() - start < static_cast<uint64_t>(ARF_DEBUG_STALL_NS)) {
    __nanosleep(256);
  }
}

// Lamport kernels have no barrier epoch; the call count (ControlBlock::lamport_calls, advanced by
// the previous call's last CTA, stream-ordered before this kernel) is the same on every rank.
__device__ __forceinline__ void stall_lamport(const KernelParams& p, StallPoint point) {
  if (p.world <= 1) return;
  stall(p, point, static_cast<uint32_t>(p.ctrl->lamport_calls));
}

#else  // hooks compile to nothing

__device__ __forceinline__ void stall(const KernelParams&, StallPoint, uint32_t) {}
__device__ __forceinline__ void stall_lamport(const KernelParams&, StallPoint) {}

#endif

}  // namespace arf::debug
