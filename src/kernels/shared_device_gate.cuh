// The shared-device gate kernel: one CTA per rank sharing a GPU, launched before each collective
// kernel (launch.cu). It waits until every device mate has reached the call (protocol.cuh,
// shared_device_gate; docs/protocol.md, "Ranks sharing a GPU"). Launched without the PDL attribute,
// so it starts only once the caller's earlier kernels on the stream have completed; it calls no
// launch_dependents, so the collective (even a PDL launch) starts only once the gate has passed.
// Included by the launcher's one translation unit only (internal linkage).
#pragma once

#include "common/kernel_params.h"
#include "kernels/protocol.cuh"

namespace arf {

static __global__ void __launch_bounds__(32, 1) shared_device_gate_kernel(const KernelParams p) {
  // One decision for the whole CTA: the gate synchronizes its threads. A released call (a peer's
  // release kernel) gates nothing: its collective will do nothing either.
  if (__syncthreads_or(protocol::aborted(p) || protocol::released(p)) != 0) return;
  (void)protocol::shared_device_gate(p);
}

}  // namespace arf
