// Host-side entry to the kernels: the single place where runtime values (dtype, world size,
// algorithm, pattern) become template arguments. Implemented in launch.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#include "base/status.h"
#include "common/kernel_params.h"
#include "common/launch_plan.h"

namespace arf {

// Called after each kernel of a multi-kernel plan except the last, before the next is enqueued
// (the local transport uses it to keep ranks sharing a GPU in step, kernel by kernel).
using BetweenKernels = std::function<Status()>;

// Enqueues the plan on `stream`. Preconditions: params validated by the host (validate.h), plan from
// the policy for the same shape. Unfused: the all-reduce kernel writes the sum into norm_out (pattern
// residual_rmsnorm) and the epilogue kernel then reads it back. Graph-capture safe.
Status launch(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
              cudaStream_t stream, const BetweenKernels& between_kernels = {});

// The epilogue kernel alone (residual add + RMSNorm, + quantization for quantized patterns) over
// params.input, which already holds the all-reduced rows in the activation dtype: the second
// kernel of the `nccl` algorithm, with the same grid rule as the unfused path's. Pattern allreduce
// has no epilogue (InternalError). Graph-capture safe.
Status launch_epilogue(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
                       cudaStream_t stream);

// Loads every kernel a communicator of `world` ranks and `dtype` can launch (cudaFuncGetAttributes
// forces the module load) and sets each staged kernel's dynamic shared memory limit to what its
// widest row (max_hidden columns) takes. Call once at init, with the communicator's device
// current: with lazy module loading the first launch of a kernel loads it, which on a GPU shared
// by several ranks waits behind peers' spinning kernels. Unsupported when max_hidden's staged rows
// need more shared memory per block than the device allows (Hopper takes 16384 columns).
Status preload_kernels(int world, DType dtype, int64_t max_hidden);

}  // namespace arf
