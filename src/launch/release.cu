// launch_release, preload_release_kernel (release.h).
#include "launch/release.h"

#include <string>

#include "base/cuda_check.h"
#include "kernels/release_kernel.cuh"

namespace arf {

Status launch_release(const KernelParams& params, cudaStream_t stream) {
  release_kernel<<<1, 32, 0, stream>>>(params);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string("launch of the release kernel failed: ") +
                                  cudaGetErrorString(err));
}

Status preload_release_kernel() {
  cudaFuncAttributes attr;
  ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, release_kernel));
  return Status::ok();
}

}  // namespace arf
