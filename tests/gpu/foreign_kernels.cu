// Foreign kernels of the shared-device tests (foreign_kernels.h).
#include "gpu/foreign_kernels.h"

namespace arf::test {
namespace {

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(1024, 1) whole_sm_kernel(uint64_t spin_ns) {
  extern __shared__ unsigned char smem[];
  smem[threadIdx.x] = static_cast<unsigned char>(threadIdx.x);
  const uint64_t start = now_ns();
  while (now_ns() - start < spin_ns) {
  }
  __syncthreads();
  if (smem[(threadIdx.x + 1) % blockDim.x] == 0xFF && threadIdx.x == 0) smem[0] = 1;  // keep it
}

__global__ void reader_kernel(const uint4* data, size_t vecs, unsigned long long* sink) {
  unsigned long long acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < vecs; i += gridDim.x * blockDim.x) {
    const uint4 v = data[i];
    acc += v.x ^ v.y ^ v.z ^ v.w;
  }
  atomicAdd(sink, acc);
}

}  // namespace

cudaError_t preload_foreign_kernels() {
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, whole_sm_kernel);
  if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, reader_kernel);
  return err;
}

cudaError_t launch_whole_sm_kernel(int ctas, uint64_t spin_ns, cudaStream_t stream) {
  int device = 0, optin = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err != cudaSuccess) return err;
  const int smem = optin - 1024;  // all but a sliver: no other CTA with shared memory fits beside it
  err = cudaFuncSetAttribute(whole_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  whole_sm_kernel<<<ctas, 1024, smem, stream>>>(spin_ns);
  return cudaGetLastError();
}

cudaError_t launch_reader_kernel(const void* data, size_t bytes, unsigned long long* sink,
                                 cudaStream_t stream) {
  reader_kernel<<<64, 256, 0, stream>>>(static_cast<const uint4*>(data), bytes / 16, sink);
  return cudaGetLastError();
}

}  // namespace arf::test
