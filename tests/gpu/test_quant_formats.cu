// The e4m3 conversion instruction (cvt.rn.satfinite.e4m3x2.f32, through __nv_cvt_float_to_fp8)
// against the software encoder the CPU reference uses, for every one of the 2^32 float bit
// patterns: kernels call encode_e4m3_device, which is the instruction on sm_89+, so this test is
// what makes "the same bits as the reference" true of the fast path (quant_formats.h).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "common/quant_formats.h"

namespace arf::test {
namespace {

struct E4m3Mismatches {
  unsigned long long count;
  uint32_t first_bits;  // input bits of the first mismatch a thread claimed
  uint32_t codes;       // (instruction code << 8) | software code of that input
  int used_instruction;
};

__global__ void compare_e4m3_encoders(E4m3Mismatches* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (blockIdx.x == 0 && threadIdx.x == 0) out->used_instruction = 1;
#endif
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float x = bit_cast<float>(static_cast<uint32_t>(i));
    const uint8_t fast = quant::encode_e4m3_device(x);
    const uint8_t soft = quant::encode_e4m3(x);
    if (fast != soft && atomicAdd(&out->count, 1ull) == 0) {
      out->first_bits = static_cast<uint32_t>(i);
      out->codes = (static_cast<uint32_t>(fast) << 8) | soft;
    }
  }
}

TEST(QuantFormatsGpu, E4m3InstructionMatchesTheReferenceEncoderOnEveryFloat) {
  E4m3Mismatches* result = nullptr;
  ASSERT_EQ(cudaMalloc(&result, sizeof(E4m3Mismatches)), cudaSuccess);
  ASSERT_EQ(cudaMemset(result, 0, sizeof(E4m3Mismatches)), cudaSuccess);
  compare_e4m3_encoders<<<4096, 256>>>(result);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  E4m3Mismatches host{};
  ASSERT_EQ(cudaMemcpy(&host, result, sizeof(host), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(result);
  int major = 0, device = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (major >= 9) {
    EXPECT_EQ(host.used_instruction, 1) << "built without sm_89+ code: the instruction was not tested";
  }
  EXPECT_EQ(host.count, 0ull) << "first mismatch: input bits 0x" << std::hex << host.first_bits
                              << ", instruction 0x" << (host.codes >> 8) << ", software 0x"
                              << (host.codes & 0xFF);
}

}  // namespace
}  // namespace arf::test
