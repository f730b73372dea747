// The release of mates whose kernels wait for a call this rank will not make (the kernel:
// kernels/release_kernel.cuh; why: core/comm_call.cc, Communicator::release_peers).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "common/kernel_params.h"

namespace arf {

// Enqueues the release kernel on `stream` (ordinary launch, never PDL: it must follow this rank's
// earlier kernels). The caller does not call it while `stream` captures a graph.
Status launch_release(const KernelParams& params, cudaStream_t stream);

// Loads the release kernel (cudaFuncGetAttributes), at creation, with the communicator's device
// current: a lazily loaded kernel's first launch could wait behind peers' spinning kernels, which
// is exactly when a release is launched.
Status preload_release_kernel();

}  // namespace arf
