// launch(): turns a LaunchPlan into kernel launches. The typed launchers are defined in launch.cuh and
// instantiated per (dtype, algorithm, pattern group) in instantiate_*.cu; this file only routes:
//   one kernel           fused algorithm with the pattern's epilogue
//   unfused / level 3    all-reduce kernel -> local epilogue kernel (norm [+ quant])
//   level 2              fused all-reduce + norm kernel -> local quantize-only kernel
#include "kernels/launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "base/cuda_check.h"
#include "kernels/kernel_params.h"
#include "kernels/protocol.cuh"

namespace arf {

template <typename T, Algorithm kAlgorithm, PatternGroup kGroup>
Status launch_algorithm(int grid, int block, Pattern pattern, const KernelParams& params, cudaStream_t stream);
template <typename T, PatternGroup kGroup>
Status launch_local_epilogue(int grid, int block, Pattern pattern, const KernelParams& params,
                             cudaStream_t stream);
template <typename T, Algorithm kAlgorithm, PatternGroup kGroup>
Status preload_algorithm(int world);
template <typename T, PatternGroup kGroup>
Status preload_local_epilogue();

namespace {

#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
// Diagnostic variants (cmake/stress.cmake: negative controls, debug stall) are built with the bf16
// kernels of the unquantized patterns only: small enough to ship to a GPU machine, and all that
// arfusion-stress drives. Everything else is refused before launch, never silently replaced.
inline constexpr bool kAllKernels = false;
#else
inline constexpr bool kAllKernels = true;
#endif

// The second kernel of a split call waits for nobody and keeps no per-CTA state: a streaming
// kernel with the plan's epilogue grid (policy.h, protocol_free_grid_cap), whatever the first
// kernel's co-residency cap (rows are independent: same bits for any grid).
int epilogue_grid(const LaunchPlan& plan, const KernelParams& params) {
  const int64_t rows = std::max<int64_t>(params.num_rows, 1);
  return static_cast<int>(std::clamp<int64_t>(plan.epilogue_grid, 1, std::min<int64_t>(rows, kMaxProtocolFreeGrid)));
}

template <typename T, PatternGroup kGroup>
Status launch_allreduce_in_group(Algorithm algorithm, int grid, int block, Pattern pattern,
                                 const KernelParams& params, cudaStream_t stream) {
  switch (algorithm) {
    case Algorithm::kOneshotLamport:
      return launch_algorithm<T, Algorithm::kOneshotLamport, kGroup>(grid, block, pattern, params, stream);
    case Algorithm::kOneshotPull:
      return launch_algorithm<T, Algorithm::kOneshotPull, kGroup>(grid, block, pattern, params, stream);
    case Algorithm::kTwoshot:
      return launch_algorithm<T, Algorithm::kTwoshot, kGroup>(grid, block, pattern, params, stream);
    default:
      return internal_error("no all-reduce kernel for this algorithm");
  }
}

template <typename T>
Status launch_allreduce_kernel(Algorithm algorithm, int grid, int block, Pattern pattern,
                               const KernelParams& params, cudaStream_t stream) {
  if (is_quant_pattern(pattern)) {
    if constexpr (kAllKernels) {
      return launch_allreduce_in_group<T, PatternGroup::kQuant>(algorithm, grid, block, pattern, params, stream);
    }
    return unsupported("this diagnostic build has no quantized kernels");
  }
  return launch_allreduce_in_group<T, PatternGroup::kPlain>(algorithm, grid, block, pattern, params, stream);
}

template <typename T>
Status launch_epilogue_kernel(int grid, int block, Pattern pattern, const KernelParams& params,
                              cudaStream_t stream) {
  if (is_quant_pattern(pattern)) {
    if constexpr (kAllKernels) {
      return launch_local_epilogue<T, PatternGroup::kQuant>(grid, block, pattern, params, stream);
    }
    return unsupported("this diagnostic build has no quantized kernels");
  }
  return launch_local_epilogue<T, PatternGroup::kPlain>(grid, block, pattern, params, stream);
}

// Unfused and level 3: the all-reduce kernel writes the rounded sum into norm_out (or the local
// scratch when a quantized pattern has no norm side output); the epilogue kernel then reads it and
// overwrites it row by row with the norm.
template <typename T>
Status launch_unfused(const LaunchPlan& plan, Pattern pattern, const KernelParams& params, cudaStream_t stream,
                      const BetweenKernels& between_kernels) {
  KernelParams ar = params;
  if (pattern != Pattern::kAllReduce) {
    ar.allreduce_out = params.norm_out != nullptr ? params.norm_out : params.scratch;
  }
  ARF_RETURN_IF_ERROR(launch_allreduce_kernel<T>(plan.inner_allreduce, plan.grid, plan.block,
                                                 Pattern::kAllReduce, ar, stream));
  if (pattern == Pattern::kAllReduce) return Status::ok();
  if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  KernelParams epilogue = params;
  epilogue.input = ar.allreduce_out;
  return launch_epilogue_kernel<T>(epilogue_grid(plan, epilogue), plan.block, pattern, epilogue, stream);
}

// Level 2: the fused all-reduce + residual + RMSNorm kernel writes the norm (into norm_out, or the
// local scratch), then the quantize-only kernel reads it back.
template <typename T>
Status launch_level2(const LaunchPlan& plan, Pattern pattern, const KernelParams& params, cudaStream_t stream,
                     const BetweenKernels& between_kernels) {
  KernelParams norm = params;
  if (norm.norm_out == nullptr) norm.norm_out = params.scratch;
  ARF_RETURN_IF_ERROR(launch_allreduce_kernel<T>(plan.algorithm, plan.grid, plan.block,
                                                 Pattern::kResidualRmsNorm, norm, stream));
  if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  KernelParams quant = params;
  quant.input = norm.norm_out;
  if constexpr (!kAllKernels) return unsupported("this diagnostic build has no quantized kernels");
  return launch_local_epilogue<T, PatternGroup::kQuantOnly>(epilogue_grid(plan, quant), plan.block, pattern, quant,
                                                            stream);
}

template <typename T>
Status launch_typed(const LaunchPlan& plan, Pattern pattern, const KernelParams& params, cudaStream_t stream,
                    const BetweenKernels& between_kernels) {
  if (plan.block <= 0 || plan.block > kMaxBlockThreads || plan.block % 32 != 0 || plan.grid <= 0) {
    return internal_error("plan has an invalid launch shape");
  }
  if (plan.algorithm == Algorithm::kUnfused) {
    return launch_unfused<T>(plan, pattern, params, stream, between_kernels);
  }
  if (is_quant_pattern(pattern) && params.fallback_level == 2) {
    return launch_level2<T>(plan, pattern, params, stream, between_kernels);
  }
  return launch_allreduce_kernel<T>(plan.algorithm, plan.grid, plan.block, pattern, params, stream);
}

// One CTA per rank sharing a GPU, before each collective kernel: protocol.cuh, shared_device_gate.
// Launched without the PDL attribute, so it starts only once the caller's earlier kernels on the
// stream have completed; it calls no launch_dependents, so our collective (even a PDL launch)
// starts only once the gate has passed.
__global__ void __launch_bounds__(32, 1) shared_device_gate_kernel(const KernelParams p) {
  // One decision for the whole CTA: the gate synchronizes its threads.
  if (__syncthreads_or(protocol::aborted(p)) != 0) return;
  (void)protocol::shared_device_gate(p);
}

// The plan owes the gate whenever ranks share a GPU (captured calls too: the graph replays it).
// The negative-control build without it keeps the protocol that deadlocks.
bool needs_gate(const LaunchPlan& plan) {
#if defined(ARF_NEGATIVE_CONTROL_NO_SHARED_DEVICE_GATE)
  (void)plan;
  return false;
#else
  return plan.shared_device_gate;
#endif
}

Status launch_gate(const KernelParams& params, cudaStream_t stream) {
  shared_device_gate_kernel<<<1, 32, 0, stream>>>(params);
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string("launch of the shared-device gate failed: ") +
                                  cudaGetErrorString(err));
}

template <typename T>
Status preload_typed(int world) {
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotLamport, PatternGroup::kPlain>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotPull, PatternGroup::kPlain>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kTwoshot, PatternGroup::kPlain>(world)));
  ARF_RETURN_IF_ERROR((preload_local_epilogue<T, PatternGroup::kPlain>()));
  if constexpr (!kAllKernels) return Status::ok();
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotLamport, PatternGroup::kQuant>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kOneshotPull, PatternGroup::kQuant>(world)));
  ARF_RETURN_IF_ERROR((preload_algorithm<T, Algorithm::kTwoshot, PatternGroup::kQuant>(world)));
  ARF_RETURN_IF_ERROR((preload_local_epilogue<T, PatternGroup::kQuant>()));
  return preload_local_epilogue<T, PatternGroup::kQuantOnly>();
}

}  // namespace

Status launch(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
              cudaStream_t stream, const BetweenKernels& between_kernels) {
  if (needs_gate(plan)) {
    ARF_RETURN_IF_ERROR(launch_gate(params, stream));
    if (between_kernels) ARF_RETURN_IF_ERROR(between_kernels());
  }
  switch (dtype) {
    case DType::kBf16: return launch_typed<__nv_bfloat16>(plan, pattern, params, stream, between_kernels);
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
    case DType::kFp16: return unsupported("this diagnostic build has bf16 kernels only");
#else
    case DType::kFp16: return launch_typed<__half>(plan, pattern, params, stream, between_kernels);
#endif
    default: return unsupported("activation dtype must be bf16 or fp16");
  }
}

Status launch_epilogue(const LaunchPlan& plan, Pattern pattern, DType dtype, const KernelParams& params,
                       cudaStream_t stream) {
  if (pattern == Pattern::kAllReduce) return internal_error("allreduce has no epilogue");
  switch (dtype) {
    case DType::kBf16:
      return launch_epilogue_kernel<__nv_bfloat16>(epilogue_grid(plan, params), plan.block, pattern,
                                                   params, stream);
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
    case DType::kFp16: return unsupported("this diagnostic build has bf16 kernels only");
#else
    case DType::kFp16:
      return launch_epilogue_kernel<__half>(epilogue_grid(plan, params), plan.block, pattern, params,
                                            stream);
#endif
    default: return unsupported("activation dtype must be bf16 or fp16");
  }
}

Status preload_kernels(int world, DType dtype) {
  cudaFuncAttributes gate_attr;
  ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&gate_attr, shared_device_gate_kernel));
  switch (dtype) {
    case DType::kBf16: return preload_typed<__nv_bfloat16>(world);
#if defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)
    case DType::kFp16: return unsupported("this diagnostic build has bf16 kernels only");
#else
    case DType::kFp16: return preload_typed<__half>(world);
#endif
    default: return unsupported("activation dtype must be bf16 or fp16");
  }
}

}  // namespace arf
