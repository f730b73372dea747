// The ipc transport's init probe (transport/ipc.h): real loads and stores through every peer
// mapping, with the memory orders the collectives use, before any collective may run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/host_device.h"
#include "base/status.h"
#include "common/kernel_params.h"

namespace arf {

// The value rank `from` writes into rank `to`'s probe slot `from`: never 0 (the zeroed slot), and
// distinct per communicator (salt), source and destination.
ARF_HD inline uint64_t probe_value(uint64_t salt, int from, int to) {
  return (salt | 1ull) ^ (static_cast<uint64_t>(from + 1) << 40) ^ (static_cast<uint64_t>(to + 1) << 48);
}

// Phase 1 (write): stores probe_value(salt, rank, p) into peer_probe[p][rank] for every rank p
// (self included), then a system-scope fence. Phase 2 (read back), after every rank's phase 1 has
// completed: loads peer_probe[p][rank] (this rank's own write, read through the mapping of p) into
// readback[p]. Both synchronous on a private stream (init only). peer_probe[p] is rank p's
// Workspace::probe() as mapped here; readback is host memory of `world` entries.
Status run_probe_writes(void* const* peer_probe, int rank, int world, uint64_t salt);
Status run_probe_reads(void* const* peer_probe, int rank, int world, uint64_t* readback);

}  // namespace arf
