// Device-side helpers shared by the soak's kernels (kernels_gen.cu, kernels_check.cu):
// pattern predicates on DeviceCall's integer pattern, block reductions for any block size that
// is a multiple of 32 (up to 1024), and the check kernel's address for the setup.
#pragma once

#include <cstdint>

#include "arfusion/arfusion.h"
#include "call_spec.h"

namespace arf::stress {

__host__ __device__ constexpr bool pat_has_norm_dev(uint32_t p) {
  return p != static_cast<uint32_t>(Pat::kAllReduce) && p != static_cast<uint32_t>(Pat::kFlat);
}

// The scale buffer of a quantized pattern that writes one (DeviceCall.pattern, .format): scales
// per token, and whether each is an fp32 value (FP8 per-token, FP8 per-group but packed UE8M0)
// rather than a byte code.
__host__ __device__ constexpr int64_t scale_cols_dev(uint32_t p, int64_t hidden) {
  return p == static_cast<uint32_t>(Pat::kFp8Token)   ? 1
         : p == static_cast<uint32_t>(Pat::kFp8Group) ? hidden / 128
         : p == static_cast<uint32_t>(Pat::kNvfp4)    ? hidden / 16
                                                      : hidden / 32;
}
__host__ __device__ constexpr bool scale_is_fp32_dev(uint32_t p, uint32_t format) {
  return p == static_cast<uint32_t>(Pat::kFp8Token) ||
         (p == static_cast<uint32_t>(Pat::kFp8Group) && format != arfScaleUe8m0Packed);
}

// Address of check_kernel (defined in kernels_check.cu) for cudaFuncSetAttribute & co.
const void* check_kernel_address();

// Sum over the block; every thread gets the result. `scratch` holds 32 values. Contains
// __syncthreads: every thread of the block must call it.
__device__ inline double block_sum(double v, double* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < warps; ++w) t += scratch[w];  // the same order in every thread
  return t;
}

// Max over the block (values >= 0); every thread gets it.
__device__ inline float block_max(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < warps; ++w) t = fmaxf(t, scratch[w]);
  return t;
}

}  // namespace arf::stress
