// The release kernel: one thread, enqueued by a rank whose host found that the ranks no longer
// issue the same calls (it refused a call a peer had launched, or a peer refused the call it
// issues, or their signatures differ), on the stream of that call, behind its earlier calls.
// It reads this rank's call index — the first call this rank did not launch, the same index on
// every rank — and lowers every rank's release_from to it (own included), so that every kernel of
// that call or a later one gives up at its next wait or at entry (protocol.cuh: spin_until,
// enter) instead of waiting out the bound for a call this rank will never make. Earlier calls are
// untouched: this rank's kernels of them have completed (stream order; launched without the PDL
// attribute), so they need nothing more from it. Two releasers racing store indices of calls
// that cannot complete either way. Included by the launcher's release unit only.
#pragma once

#include "common/kernel_params.h"
#include "kernels/protocol.cuh"

namespace arf {

static __global__ void __launch_bounds__(32, 1) release_kernel(const KernelParams p) {
  if (threadIdx.x != 0) return;
  const uint64_t from = protocol::current_call(p);
  for (int r = 0; r < p.world && r < kMaxRanks; ++r) {
    ControlBlock* c = r == p.rank ? p.ctrl : const_cast<ControlBlock*>(p.peers.ctrl[r]);
    if (c == nullptr) continue;
    volatile uint64_t* word = &c->release_from;
    if (from < *word) *word = from;
  }
  __threadfence_system();
}

}  // namespace arf
