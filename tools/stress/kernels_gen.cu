// The generate and overwrite kernels of the soak, their launch wrappers, and the setup of
// all three foreign kernels (kernels.h says what each does and why they are large).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "call_spec.h"
#include "data_gen.h"
#include "kernels.h"
#include "kernels_device.cuh"
#include "quant_rules.h"
#include "self_test.h"

namespace arf::stress {

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(1024) generate_kernel(DeviceCall c) {
  extern __shared__ uint4 footprint[];  // reserved, not used: the point is the CTA's size
  (void)footprint;
  const uint64_t delay = skew_ns(c.seed, c.call, c.rank, c.skew_us);
  if (delay > 0) {
    const uint64_t start = global_timer_ns();
    while (global_timer_ns() - start < delay) {
    }
  }
  const Act dt = c.fp16 ? Act::kFp16 : Act::kBf16;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t in_base = stream_base(c.seed, c.call, c.rank, kStreamInput);
  for (int64_t i = first; i < c.count; i += stride) {
    c.input[i] = data_value16(in_base, static_cast<uint64_t>(i), dt);
  }
  if (pat_has_norm_dev(c.pattern)) {
    const uint32_t data_rank = shared_data_rank(c.per_rank != 0, c.rank);
    if (c.residual_in != nullptr) {
      const uint64_t base = stream_base(c.seed, c.call, data_rank, kStreamResidual);
      for (int64_t i = first; i < c.tokens * c.hidden; i += stride) {
        c.residual_in[i] = data_value16(base, static_cast<uint64_t>(i), dt);
      }
    }
    const uint64_t gbase = stream_base(c.seed, c.call, data_rank, kStreamGamma);
    const uint64_t pbase = stream_base(c.seed, c.call, data_rank, kStreamPostGamma);
    for (int64_t i = first; i < c.hidden; i += stride) {
      if (c.gamma_fp32) {
        static_cast<float*>(c.gamma)[i] = data_value32(gbase, static_cast<uint64_t>(i));
        if (c.post_gamma != nullptr) static_cast<float*>(c.post_gamma)[i] = data_value32(pbase, static_cast<uint64_t>(i));
      } else {
        static_cast<uint16_t*>(c.gamma)[i] = data_value16(gbase, static_cast<uint64_t>(i), dt);
        if (c.post_gamma != nullptr) {
          static_cast<uint16_t*>(c.post_gamma)[i] = data_value16(pbase, static_cast<uint64_t>(i), dt);
        }
      }
    }
  }
  if (c.scale_in != nullptr && first == 0) {
    *c.scale_in = scale_in_value(c.seed, c.call, c.pattern == static_cast<uint32_t>(Pat::kNvfp4));
  }
  if (c.scale_out != nullptr) {
    for (int64_t b = first; b < c.scale_bytes; b += stride) c.scale_out[b] = 0xA5u;
  }
}

__global__ void __launch_bounds__(1024) overwrite_kernel(DeviceCall c) {
  extern __shared__ uint4 footprint[];
  (void)footprint;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t base = stream_base(c.seed, c.call, c.rank, kStreamGarbage);
  if (!c.input_is_output) {
    for (int64_t i = first; i < c.count; i += stride) c.input[i] = garbage16(base, static_cast<uint64_t>(i));
  }
  if (pat_has_norm_dev(c.pattern)) {
    if (c.residual_in != nullptr && !c.residual_is_output) {
      for (int64_t i = first; i < c.tokens * c.hidden; i += stride) {
        c.residual_in[i] = garbage16(base, static_cast<uint64_t>(i) + (uint64_t{1} << 40));
      }
    }
    for (int64_t i = first; i < c.hidden; i += stride) {
      const uint64_t k = static_cast<uint64_t>(i) + (uint64_t{2} << 40);
      const uint64_t kp = static_cast<uint64_t>(i) + (uint64_t{4} << 40);
      if (c.gamma_fp32) {
        static_cast<uint32_t*>(c.gamma)[i] = garbage32(base, k);
        if (c.post_gamma != nullptr) static_cast<uint32_t*>(c.post_gamma)[i] = garbage32(base, kp);
      } else {
        static_cast<uint16_t*>(c.gamma)[i] = garbage16(base, k);
        if (c.post_gamma != nullptr) static_cast<uint16_t*>(c.post_gamma)[i] = garbage16(base, kp);
      }
    }
  }
  if (c.scale_in != nullptr && first == 0) *c.scale_in = u2f(garbage32(base, uint64_t{3} << 40));
}

__global__ void corrupt_kernel(DeviceCall c, int output) {
  if (c.table == nullptr || threadIdx.x != 0 || blockIdx.x != 0) return;  // warm-up launch
  const bool norm = pat_has_norm_dev(c.pattern);
  const bool quant = c.quant_out != nullptr;
  const bool scale = c.scale_out != nullptr && c.scale_bytes > 0;
  if (output == kCorruptNorm && norm) {
    const_cast<uint16_t*>(c.norm_out)[0] ^= 0x4000u;
  } else if (output == kCorruptQuant && quant) {
    const_cast<uint8_t*>(c.quant_out)[0] ^= 0x40u;  // e4m3: an exponent bit; FP4: element 1's top bit
  } else if (output == kCorruptScale && scale) {
    const bool fp32 = scale_is_fp32_dev(c.pattern, c.format);
    const int64_t off = scale_offset(c.layout, fp32, 0, 0, c.tokens, scale_cols_dev(c.pattern, c.hidden));
    if (fp32) {
      c.scale_out[off + 2] ^= 0x80u;  // the fp32 exponent's lowest bit: the scale doubles or halves
    } else {
      c.scale_out[off] ^= 0x08u;
    }
  } else if (norm) {
    const_cast<uint16_t*>(c.residual_out)[0] ^= 0x4000u;
  } else {
    const_cast<uint16_t*>(c.allreduce_out)[0] ^= 0x4000u;
  }
}

cudaError_t launch_corrupt(const DeviceCall& c, int output, cudaStream_t stream) {
  corrupt_kernel<<<1, 32, 0, stream>>>(c, output);
  return cudaGetLastError();
}

namespace {

int grid_of(const ForeignShape& s) { return s.grid > 0 ? s.grid : 1; }

std::string fit(const void* kernel, const char* name, const ForeignShape& s) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, s.smem_bytes);
  if (e != cudaSuccess) {
    return std::string(name) + ": cudaFuncSetAttribute(MaxDynamicSharedMemorySize=" +
           std::to_string(s.smem_bytes) + "): " + cudaGetErrorString(e);
  }
  cudaFuncAttributes attr{};
  if ((e = cudaFuncGetAttributes(&attr, kernel)) != cudaSuccess) {
    return std::string(name) + ": cudaFuncGetAttributes: " + cudaGetErrorString(e);
  }
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, s.block, s.smem_bytes);
  if (e != cudaSuccess) {
    return std::string(name) + ": occupancy query: " + cudaGetErrorString(e);
  }
  if (per_sm < 1) {
    return std::string(name) + ": a CTA of " + std::to_string(s.block) + " threads, " +
           std::to_string(attr.numRegs) + " registers and " + std::to_string(s.smem_bytes) +
           " B of dynamic shared memory does not fit on an SM";
  }
  std::printf("# foreign kernel %-9s block %4d  smem %6d B  regs %3d  CTAs/SM %d\n", name, s.block,
              s.smem_bytes, attr.numRegs, per_sm);
  return "";
}

}  // namespace

std::string prepare_foreign_kernels(const ForeignShape& s) {
  for (const auto& [kernel, name] :
       {std::pair<const void*, const char*>{reinterpret_cast<const void*>(&generate_kernel), "generate"},
        {reinterpret_cast<const void*>(&overwrite_kernel), "overwrite"},
        {check_kernel_address(), "check"}}) {
    const std::string why = fit(kernel, name, s);
    if (!why.empty()) return why;
  }
  return "";
}

cudaError_t launch_generate(const DeviceCall& c, const ForeignShape& s, cudaStream_t stream) {
  generate_kernel<<<grid_of(s), s.block, s.smem_bytes, stream>>>(c);
  return cudaGetLastError();
}

cudaError_t launch_overwrite(const DeviceCall& c, const ForeignShape& s, cudaStream_t stream) {
  overwrite_kernel<<<grid_of(s), s.block, s.smem_bytes, stream>>>(c);
  return cudaGetLastError();
}

cudaError_t warm_up_foreign_kernels(const ForeignShape& s, cudaStream_t stream) {
  DeviceCall idle;  // count 0, no buffers, table NULL: every kernel returns at once
  idle.pattern = static_cast<uint32_t>(Pat::kAllReduce);
  cudaError_t e = launch_generate(idle, s, stream);
  if (e == cudaSuccess) e = launch_overwrite(idle, s, stream);
  if (e == cudaSuccess) e = launch_check(idle, s, 1, stream);
  if (e == cudaSuccess) e = launch_corrupt(idle, kCorruptPrimary, stream);
  return e;
}

}  // namespace arf::stress
