// The single runtime -> compile-time dispatch (world size, pattern, vectors per thread, algorithm)
// for one dtype T. Included only by the instantiate_*.cu files, one per (dtype, algorithm, pattern
// group), so builds parallelise and no file compiles more than ~100 kernels.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <type_traits>
#include <utility>

#include "base/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/oneshot_lamport.cuh"
#include "kernels/oneshot_pull.cuh"
#include "kernels/quant_epilogue.cuh"
#include "kernels/twoshot.cuh"

namespace arf {


// World sizes the kernels are built for; any other size never reaches here (policy feasibility).
template <typename F>
Status with_world_size(int world, F&& f) {
  switch (world) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return unsupported("world size " + std::to_string(world) + " has no kernels (1, 2, 4, 8)");
  }
}

template <typename T, int kVecs, bool kHold, template <typename, int, typename, bool> class QuantEpilogue,
          typename F>
Status with_quantizer(Pattern pattern, F&& f) {
  switch (pattern) {
    case Pattern::kFp8PerTensor: return f(std::type_identity<QuantEpilogue<T, kVecs, Fp8PerTensorQuant, kHold>>{});
    case Pattern::kFp8PerToken: return f(std::type_identity<QuantEpilogue<T, kVecs, Fp8PerTokenQuant, kHold>>{});
    case Pattern::kFp8PerGroup: return f(std::type_identity<QuantEpilogue<T, kVecs, Fp8PerGroupQuant, kHold>>{});
    case Pattern::kNvfp4: return f(std::type_identity<QuantEpilogue<T, kVecs, Nvfp4Quant, kHold>>{});
    case Pattern::kMxfp4: return f(std::type_identity<QuantEpilogue<T, kVecs, Mxfp4Quant, kHold>>{});
    default: return internal_error("not a quantized pattern");
  }
}

// kHold: the kernel never waits for peers (a streaming kernel: streaming_epilogue.cuh), so its
// epilogue is the streaming variant (ResidualRmsNormEpilogue, kStreaming: gamma in registers).
template <typename T, int kVecs, PatternGroup kGroup, bool kHold, typename F>
Status with_pattern(Pattern pattern, F&& f) {
  if constexpr (kGroup == PatternGroup::kPlain) {
    switch (pattern) {
      case Pattern::kAllReduce: return f(std::type_identity<AllReduceEpilogue<T, kVecs>>{});
      case Pattern::kResidualRmsNorm: return f(std::type_identity<ResidualRmsNormEpilogue<T, kVecs, kHold>>{});
      default: return internal_error("not a plain pattern");
    }
  } else if constexpr (kGroup == PatternGroup::kQuant) {
    return with_quantizer<T, kVecs, kHold, ResidualRmsNormQuantEpilogue>(pattern, f);
  } else {
    return with_quantizer<T, kVecs, kHold, QuantOnlyEpilogue>(pattern, f);
  }
}

// Vectors per thread: 1, 2 or 4 (a row needs ceil(row_vecs / block) <= kMaxVecsPerThread). Sizing the
// register arrays to the row keeps small rows' kernels free of unused registers (and spills).
inline int vecs_per_thread(int row_elems, int block) {
  const int row_vecs = (row_elems + kElemsPerVec - 1) / kElemsPerVec;
  const int per_thread = (row_vecs + block - 1) / block;
  return per_thread <= 1 ? 1 : per_thread <= 2 ? 2 : 4;
}

// The epilogue type for (pattern, vectors per thread); kHold as in with_pattern.
template <typename T, PatternGroup kGroup, bool kHold, typename F>
Status with_epilogue(Pattern pattern, int vecs, F&& f) {
  static_assert(kMaxVecsPerThread == 4);
  switch (vecs) {
    case 1: return with_pattern<T, 1, kGroup, kHold>(pattern, f);
    case 2: return with_pattern<T, 2, kGroup, kHold>(pattern, f);
    default: return with_pattern<T, 4, kGroup, kHold>(pattern, f);
  }
}

// Only world-1 fused kernels and local epilogue kernels never wait for a peer: both are streaming
// kernels (oneshot_lamport_kernel<T, 1, E> and local_epilogue_kernel run stream_rows).
template <int kWorld>
inline constexpr bool kHoldGammaAtWorld = kWorld == 1;
inline constexpr bool kHoldGammaLocal = true;

template <typename T, int kWorld, typename Epilogue, Algorithm kAlgorithm>
constexpr auto kernel_for() {
  static_assert(RowEpilogue<Epilogue>);
  if constexpr (kAlgorithm == Algorithm::kOneshotLamport) return &oneshot_lamport_kernel<T, kWorld, Epilogue>;
  else if constexpr (kAlgorithm == Algorithm::kOneshotPull) return &oneshot_pull_kernel<T, kWorld, Epilogue>;
  else return &twoshot_kernel<T, kWorld, Epilogue>;
}

// <<<grid, block, 0, stream>>>(params), or the same through cudaLaunchKernelEx with the
// programmatic-stream-serialization attribute when params.programmatic_launch (kernels/pdl.cuh).
inline cudaError_t launch_kernel(void (*kernel)(KernelParams), int grid, int block,
                                 const KernelParams& params, cudaStream_t stream) {
  if (!params.programmatic_launch) {
    kernel<<<grid, block, 0, stream>>>(params);
    return cudaGetLastError();
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(block));
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, params);
}

inline Status check_launch(const char* what, cudaError_t err) {
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string("launch of ") + what + " failed: " + cudaGetErrorString(err));
}

// One all-reduce kernel of algorithm kAlgorithm (lamport, pull or twoshot) with `pattern`'s epilogue.
template <typename T, Algorithm kAlgorithm, PatternGroup kGroup>
Status launch_algorithm(int grid, int block, Pattern pattern, const KernelParams& params,
                        cudaStream_t stream) {
  const int vecs = vecs_per_thread(params.row_elems, block);
  return with_world_size(params.world, [&]<int kWorld>(std::integral_constant<int, kWorld>) {
    return with_epilogue<T, kGroup, kHoldGammaAtWorld<kWorld>>(pattern, vecs, [&]<typename E>(std::type_identity<E>) {
      return check_launch("all-reduce kernel", launch_kernel(kernel_for<T, kWorld, E, kAlgorithm>(),
                                                             grid, block, params, stream));
    });
  });
}

// The local epilogue kernel (no communication) over params.input.
template <typename T, PatternGroup kGroup>
Status launch_local_epilogue(int grid, int block, Pattern pattern, const KernelParams& params,
                             cudaStream_t stream) {
  return with_epilogue<T, kGroup, kHoldGammaLocal>(pattern, vecs_per_thread(params.row_elems, block),
                                                    [&]<typename E>(std::type_identity<E>) {
    return check_launch("epilogue kernel",
                        launch_kernel(local_epilogue_kernel<T, E>, grid, block, params, stream));
  });
}

template <PatternGroup kGroup>
constexpr auto patterns_of() {
  if constexpr (kGroup == PatternGroup::kPlain) {
    return std::array{Pattern::kAllReduce, Pattern::kResidualRmsNorm};
  } else {
    return std::array{Pattern::kFp8PerTensor, Pattern::kFp8PerToken, Pattern::kFp8PerGroup,
                      Pattern::kNvfp4, Pattern::kMxfp4};
  }
}

// Forces the module load of every kernel of (kAlgorithm, kGroup) for `world` (see launch.h).
template <typename T, Algorithm kAlgorithm, PatternGroup kGroup>
Status preload_algorithm(int world) {
  return with_world_size(world, [&]<int kWorld>(std::integral_constant<int, kWorld>) {
    for (Pattern pattern : patterns_of<kGroup>()) {
      for (int vecs : {1, 2, 4}) {
        ARF_RETURN_IF_ERROR((with_epilogue<T, kGroup, kHoldGammaAtWorld<kWorld>>(
            pattern, vecs, [&]<typename E>(std::type_identity<E>) {
          cudaFuncAttributes attr;
          ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel_for<T, kWorld, E, kAlgorithm>()));
          return Status::ok();
        })));
      }
    }
    return Status::ok();
  });
}

template <typename T, PatternGroup kGroup>
Status preload_local_epilogue() {
  for (Pattern pattern : patterns_of<kGroup>()) {
    for (int vecs : {1, 2, 4}) {
      ARF_RETURN_IF_ERROR((with_epilogue<T, kGroup, kHoldGammaLocal>(
          pattern, vecs, [&]<typename E>(std::type_identity<E>) {
        cudaFuncAttributes attr;
        ARF_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, local_epilogue_kernel<T, E>));
        return Status::ok();
      })));
    }
  }
  return Status::ok();
}

}  // namespace arf

// Explicit instantiation of one (dtype, algorithm, group); used once per instantiate_*.cu file.
#define ARF_INSTANTIATE_ALGORITHM(T, ALGO, GROUP)                                                 \
  template arf::Status arf::launch_algorithm<T, ALGO, GROUP>(int, int, arf::Pattern,              \
                                                             const arf::KernelParams&, cudaStream_t); \
  template arf::Status arf::preload_algorithm<T, ALGO, GROUP>(int);

#define ARF_INSTANTIATE_LOCAL_EPILOGUE(T, GROUP)                                                  \
  template arf::Status arf::launch_local_epilogue<T, GROUP>(int, int, arf::Pattern,               \
                                                            const arf::KernelParams&, cudaStream_t); \
  template arf::Status arf::preload_local_epilogue<T, GROUP>();
