// GPU check that the paired conversion instructions give, in each half, the bits of the scalar
// conversion, for every float bit pattern in either half (the other half a varying pattern):
// e4m3 (cvt.rn.satfinite.e4m3x2.f32, used by quant_formats.h encode_e4m3x2_device) and, for
// reference, bf16x2 / f16x2 (cvt.rn.bf16x2.f32 / cvt.rn.f16x2.f32).
//   nvcc -O3 -arch=sm_90 -std=c++20 dev/measure/ab/cvt_pair_check.cu -o cvt_pair_check && ./cvt_pair_check
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdio>

__global__ void check(unsigned long long* bad) {
  unsigned long long e4m3 = 0, bf16 = 0, f16 = 0;
  const unsigned stride = gridDim.x * blockDim.x;
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < (1ull << 32); i += stride) {
    const unsigned u = static_cast<unsigned>(i);
    const float a = __uint_as_float(u), c = __uint_as_float(u * 2654435761u + 12345u);
    const unsigned s8 = __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3);
    const unsigned lo8 = __nv_cvt_float2_to_fp8x2(make_float2(a, c), __NV_SATFINITE, __NV_E4M3) & 0xFFu;
    const unsigned hi8 = __nv_cvt_float2_to_fp8x2(make_float2(c, a), __NV_SATFINITE, __NV_E4M3) >> 8;
    e4m3 += (lo8 != s8) + (hi8 != s8);
    const unsigned short sb = __bfloat16_as_ushort(__float2bfloat16_rn(a));
    const __nv_bfloat162 pb0 = __floats2bfloat162_rn(a, c), pb1 = __floats2bfloat162_rn(c, a);
    bf16 += (__bfloat16_as_ushort(pb0.x) != sb) + (__bfloat16_as_ushort(pb1.y) != sb);
    const unsigned short sh = __half_as_ushort(__float2half_rn(a));
    const __half2 ph0 = __floats2half2_rn(a, c), ph1 = __floats2half2_rn(c, a);
    f16 += (__half_as_ushort(ph0.x) != sh) + (__half_as_ushort(ph1.y) != sh);
  }
  atomicAdd(&bad[0], e4m3);
  atomicAdd(&bad[1], bf16);
  atomicAdd(&bad[2], f16);
}

int main() {
  unsigned long long* bad;
  cudaMallocManaged(&bad, 3 * sizeof(*bad));
  bad[0] = bad[1] = bad[2] = 0;
  check<<<132 * 16, 256>>>(bad);
  if (cudaDeviceSynchronize() != cudaSuccess) { std::printf("CUDA error\n"); return 2; }
  std::printf("2^32 inputs x 2 halves: e4m3x2 %llu, bf16x2 %llu, f16x2 %llu mismatches\n", bad[0], bad[1], bad[2]);
  return bad[0] || bad[1] || bad[2];
}
