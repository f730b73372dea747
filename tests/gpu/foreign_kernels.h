// Kernels that are not arfusion's, put on the rank streams around collective calls the way an
// engine's GEMMs and elementwise kernels are (test_shared_device.cc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace arf::test {

// Loads both kernels now (cudaFuncGetAttributes). With lazy module loading a kernel's first launch
// may wait for the context to go idle, which never happens while a peer's collective spins for
// this rank: every kernel a virtual rank launches between collectives must be loaded first.
cudaError_t preload_foreign_kernels();

// A kernel each of whose CTAs needs a whole SM (1024 threads and nearly all of the SM's shared
// memory), `ctas` of them, each spinning `spin_ns` on the device clock: it cannot run next to any
// CTA that holds an SM, so a collective spinning on every SM would starve it forever.
cudaError_t launch_whole_sm_kernel(int ctas, uint64_t spin_ns, cudaStream_t stream);

// Reads `bytes` at `data` and writes a checksum into `sink` (one word): a consumer of a call's
// outputs, stream-ordered behind the call.
cudaError_t launch_reader_kernel(const void* data, size_t bytes, unsigned long long* sink,
                                 cudaStream_t stream);

}  // namespace arf::test
