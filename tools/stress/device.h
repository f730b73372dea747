// The stress tool's own device work: the consumer kernel, and CUDA error checking for the tool.
//
// The consumer is the trick engines' own all-reduce tests use (docs/testing.md): right after a
// collective returns on a rank's stream, overwrite the call's inputs, as the next layer of a model
// would reuse those buffers. A peer that still reads this rank's data after the call (a missing end
// barrier) then reads the overwrite instead of the input. It is a kernel rather than a memset so it
// occupies SMs the way an engine's next kernel does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace arf::stress {

// Thrown by setup code on any CUDA or arfusion error; main() reports it and exits 3.
class StressError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws StressError("<what>: <CUDA error>") unless err == cudaSuccess.
void cuda_check(cudaError_t err, const std::string& what);

// Up to three regions of 16-bit words, overwritten with finite values that differ from any input
// (0x5Axx, with a random sign and low byte from `salt` and the index). Null regions are skipped.
struct ConsumerTargets {
  void* ptr[3] = {nullptr, nullptr, nullptr};
  int64_t words[3] = {0, 0, 0};
};

// Enqueues the consumer on `stream`. Graph-capture safe.
cudaError_t launch_consumer(const ConsumerTargets& targets, uint32_t salt, cudaStream_t stream);

// Loads the consumer kernel on the current device now. With lazy module loading its first launch
// would load it, which waits for the device to go idle: behind peers' spinning kernels when ranks
// share a GPU (include/arfusion/arfusion.h, the virtual-rank rule).
cudaError_t preload_consumer();

}  // namespace arf::stress
