// The workspace's one device-side initialisation: the Lamport buffers start as -0.0 (the empty-slot
// sentinel, kernel_params.h kNegZeroBits) before the rank joins, so a peer never reads an
// uninitialised slot as data (workspace.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"
#include "common/kernel_params.h"

namespace arf {

// Fills `count` elements at `ptr` with -0.0 of dtype (bf16 or fp16; fp32 is Unsupported) on the
// current device, stream-ordered on `stream`. Not for graph capture (init only).
Status fill_negative_zero(void* ptr, int64_t count, DType dtype, cudaStream_t stream);

}  // namespace arf
