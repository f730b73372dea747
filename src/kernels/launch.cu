// launch(): turns a Plan into kernel launches. The typed launchers are defined in launch.cuh and
// instantiated per (dtype, algorithm) in instantiate_*.cu; this file only routes to them.
#include "kernels/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda_check.h"
#include "kernels/vec.cuh"

namespace arf {

template <typename T, Algorithm kAlgorithm>
Status launch_algorithm(int grid, int block, Pattern pattern, const KernelParams& params, cudaStream_t stream);
template <typename T>
Status launch_local_epilogue(int grid, int block, Pattern pattern, const KernelParams& params,
                             cudaStream_t stream);
template <typename T, Algorithm kAlgorithm>
Status preload_algorithm(int world);
template <typename T>
Status preload_local_epilogue();

namespace {

template <typename T>
Status launch_allreduce_kernel(Algorithm algorithm, int grid, int block, Pattern pattern,
                               const KernelParams& params, cudaStream_t stream) {
  switch (algorithm) {
    case Algorithm::kOneshotLamport:
      return launch_algorithm<T, Algorithm::kOneshotLamport>(grid, block, pattern, params, stream);
    case Algorithm::kOneshotPull:
      return launch_algorithm<T, Algorithm::kOneshotPull>(grid, block, pattern, params, stream);
    case Algorithm::kTwoshot:
      return launch_algorithm<T, Algorithm::kTwoshot>(grid, block, pattern, params, stream);
    default:
      return internal_error("no all-reduce kernel for this algorithm");
  }
}

// Unfused: the all-reduce kernel writes the rounded sum (into norm_out for residual_rmsnorm, which the
// epilogue then overwrites in place row by row), then the standalone epilogue kernel runs.
template <typename T>
Status launch_unfused(const Plan& plan, Pattern pattern, const KernelParams& params, cudaStream_t stream,
                      const BetweenKernels& between_kernels) {
  KernelParams ar = params;
  if (pattern == Pattern::kResidualRmsNorm) ar.allreduce_out = params.norm_out;
  ARF_RETURN_IF_ERROR(launch_allreduce_kernel<T>(plan.inner_allreduce, plan.grid, plan.block,
                                                 Pattern::kAllReduce, ar, stream));
  if (pattern == Pattern::kAllReduce) return Status::ok();
  if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  KernelParams epilogue = params;
  epilogue.input = params.norm_out;
  return launch_local_epilogue<T>(plan.grid, plan.block, pattern, epilogue, stream);
}

template <typename T>
Status launch_typed(const Plan& plan, Pattern pattern, const KernelParams& params, cudaStream_t stream,
                    const BetweenKernels& between_kernels) {
  if (plan.block <= 0 || plan.block > kMaxBlockThreads || plan.block % 32 != 0 || plan.grid <= 0) {
    return internal_error("plan has an invalid launch shape");
  }
  if (plan.algorithm == Algorithm::kUnfused) {
    return launch_unfused<T>(plan, pattern, params, stream, between_kernels);
  }
  return launch_allreduce_kernel<T>(plan.algorithm, plan.grid, plan.block, pattern, params, stream);
}

__global__ void fill_u16_kernel(uint16_t* ptr, int64_t count, uint16_t value) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    ptr[i] = value;
  }
}

}  // namespace

Status launch(const Plan& plan, Pattern pattern, DType dtype, const KernelParams& params,
              cudaStream_t stream, const BetweenKernels& between_kernels) {
  switch (dtype) {
    case DType::kBf16: return launch_typed<__nv_bfloat16>(plan, pattern, params, stream, between_kernels);
    case DType::kFp16: return launch_typed<__half>(plan, pattern, params, stream, between_kernels);
    default: return unsupported("activation dtype must be bf16 or fp16");
  }
}

namespace {
template <typename T>
Status preload_typed(int world) {
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotLamport>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotPull>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kTwoshot>(world)));
  return preload_local_epilogue<T>();
}
}  // namespace

Status preload_kernels(int world, DType dtype) {
  switch (dtype) {
    case DType::kBf16: return preload_typed<__nv_bfloat16>(world);
    case DType::kFp16: return preload_typed<__half>(world);
    default: return unsupported("activation dtype must be bf16 or fp16");
  }
}

Status fill_negative_zero(void* ptr, int64_t count, DType dtype, cudaStream_t stream) {
  if (dtype == DType::kFp32) return unsupported("Lamport buffers hold bf16/fp16 only");
  if (count <= 0) return Status::ok();
  fill_u16_kernel<<<1024, 256, 0, stream>>>(static_cast<uint16_t*>(ptr), count,
                                            static_cast<uint16_t>(kNegZeroBits));
  ARF_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace arf
