// The Lamport sentinel fill (lamport_fill.h).
#include "transport/lamport_fill.h"

#include "base/cuda_check.h"

namespace arf {
namespace {

__global__ void fill_u16_kernel(uint16_t* ptr, int64_t count, uint16_t value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    ptr[i] = value;
  }
}

}  // namespace

Status fill_negative_zero(void* ptr, int64_t count, DType dtype, cudaStream_t stream) {
  if (dtype == DType::kFp32) return unsupported("Lamport buffers hold bf16/fp16 only");
  if (count <= 0) return Status::ok();
  fill_u16_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(ptr), count,
                                            static_cast<uint16_t>(kNegZeroBits));
  ARF_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace arf
