// Bit-exact encoders and decoders of the quantized formats (FP8 e4m3, FP4 e2m1, UE8M0) and the
// scale rules of every quantized epilogue (arfusion.h states them for callers). One copy of this arithmetic serves
// the GPU kernels and the CPU reference (src/reference/quant_reference.cc), so the two produce the
// same bits: everything here is integer bit manipulation plus single IEEE operations (one division
// or one multiplication per step, never a*b+c that a compiler could contract into an FMA). On the
// device div_rn/mul_rn are __fdiv_rn/__fmul_rn, which are the IEEE operations regardless of
// -prec-div=false or FMA contraction. The one build requirement: no -ftz=true, which
// --use_fast_math implies (it turns even __fdiv_rn into div.rn.ftz.f32); bf16 subnormals are legal
// norm values and must not flush.
//
// Stated choices (tests/cpu/test_quant_formats.cc pins every one):
//  * e4m3 (OCP e4m3fn, max 448, no Inf): round to nearest even; every |x| > 448, +-Inf included,
//    SATURATES to +-448 ("quant_out = saturate(norm / scale)"); NaN -> 0x7F whatever its sign;
//    the sign of a zero result is kept (-0.0 and negative underflow -> 0x80); subnormals
//    (k * 2^-9) are produced and decoded. These are the rules of CUDA's
//    __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3), whose sm_89+ form is the instruction
//    cvt.rn.satfinite.e4m3x2.f32; the CPU tests check its host implementation bit for bit, and
//    tests/gpu/test_quant_formats.cu checks the instruction against encode_e4m3 for all 2^32
//    inputs, which is what lets kernels on sm_89+ use it (encode_e4m3_device).
//  * e2m1 (0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives): round to nearest even, |x| > 6 and +-Inf
//    saturate to +-6, NaN -> +6 (0x7; the format has no NaN), zero sign kept. Checked against
//    CUDA's __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest), which on sm_90 is software.
//  * UE8M0 (byte e means 2^(e-127), 0xFF = NaN): encode rounds |x| UP to a power of two, as
//    DeepGEMM/FlashInfer do for scales: 0 and anything <= 2^-127 -> 0x00, > 2^127 and +Inf
//    saturate to 0xFE, NaN -> 0xFF. Checked against __nv_cvt_float_to_e8m0(x, __NV_SATFINITE,
//    cudaRoundPosInf).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#include <cuda_fp8.h>
#endif

#include "base/bit_cast.h"
#include "base/host_device.h"

namespace arf::quant {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kE2m1Max = 6.0f;
// Floor of every dynamic FP8 scale: 2^-9 / 448 = 1 / (448 * 512) (bits 0x36924925), the smallest
// e4m3 subnormal over the e4m3 maximum, as FlashInfer's dynamic FP8 (MIN_FP8_SCALE) and vLLM's
// per-token quant (1 / (448 * 512)) use. It keeps a scale of an all-zero row or group positive,
// finite and normal, so x / scale never divides by zero or by a subnormal.
inline constexpr float kMinFp8Scale = 1.0f / (448.0f * 512.0f);
inline constexpr uint8_t kE4m3Nan = 0x7F;
inline constexpr uint8_t kUe8m0Nan = 0xFF;

// ---- exact IEEE primitives, identical on host and device ------------------------------------

ARF_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

ARF_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Fused multiply-add, rounded once (IEEE fma): __fmaf_rn on the device, std::fmaf on the host.
ARF_HD inline float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

// RN(1 / x), the IEEE reciprocal.
ARF_HD inline float rcp_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(x);
#else
  return 1.0f / x;
#endif
}

// Running absolute maximum. NaN elements are ignored (a NaN compares false), which is what
// fmaxf(acc, fabsf(x)) and __hmax do on the GPU, so any reduction order gives the same amax.
ARF_HD inline float abs_max(float acc, float x) {
  const float a = bit_cast<float>(bit_cast<uint32_t>(x) & 0x7FFFFFFFu);
  return a > acc ? a : acc;
}

// ---- shared rounding core --------------------------------------------------------------------

// Magnitude code (biased exponent << kManBits | mantissa) of a float magnitude `a` (sign cleared,
// finite, below the format's overflow threshold), rounded to nearest even, for a format with
// kManBits mantissa bits whose smallest normal is 2^kEmin. A mantissa carry moves into the
// exponent field, which is the correctly rounded next binade (subnormal -> smallest normal too).
template <int kManBits, int kEmin>
ARF_HD inline uint32_t round_magnitude(uint32_t a) {
  const uint32_t exp = a >> 23;
  const uint32_t mant = a & 0x7FFFFFu;
  uint32_t code, rem, half;
  if (static_cast<int>(exp) - 127 >= kEmin) {  // normal in the target format
    constexpr uint32_t kDrop = 23 - kManBits;
    code = ((exp - static_cast<uint32_t>(127 + kEmin - 1)) << kManBits) | (mant >> kDrop);
    rem = mant & ((1u << kDrop) - 1u);
    half = 1u << (kDrop - 1u);
  } else {
    // Subnormal in the target: code = round(|x| / 2^(kEmin - kManBits)). With the implicit bit,
    // |x| = m * 2^(exp - 150), so code = m >> shift. Float subnormals are far below every target
    // subnormal and round to zero.
    if (exp == 0) return 0;
    const uint32_t m = mant | 0x800000u;
    const int shift = 150 + kEmin - kManBits - static_cast<int>(exp);
    if (shift > 31) return 0;  // below half the smallest subnormal
    code = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1);
  }
  if (rem > half || (rem == half && (code & 1u))) ++code;
  return code;
}

// ---- FP8 e4m3 (OCP e4m3fn) ---------------------------------------------------------------------

ARF_HD inline uint8_t encode_e4m3(float x) {
  const uint32_t u = bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE4m3Nan;
  // Everything above 448 saturates: (448, 464) rounds to 448, 464 is the tie whose even neighbour
  // is 448, and above it the next step (480) would be the NaN code.
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7Eu);
  return static_cast<uint8_t>(sign | round_magnitude<3, -6>(a));
}

// encode_e4m3 as kernels run it: on sm_89+ the conversion instruction (one instruction for what
// is ~25 integer operations in software; the same bits for every input, tested exhaustively).
ARF_HD inline uint8_t encode_e4m3_device(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
#else
  return encode_e4m3(x);
#endif
}

// Two elements at once: lo in bits 0-7, hi in bits 8-15. On sm_89+ the one conversion instruction
// whose low half encode_e4m3_device uses (cvt.rn.satfinite.e4m3x2.f32 converts each half
// independently), so each byte is encode_e4m3_device of its element.
ARF_HD inline uint16_t encode_e4m3x2_device(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, __NV_E4M3));
#else
  return static_cast<uint16_t>(encode_e4m3(lo) | (encode_e4m3(hi) << 8));
#endif
}

ARF_HD inline float decode_e4m3(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp = (c >> 3) & 0xFu;
  const uint32_t mant = c & 0x7u;
  if ((c & 0x7Fu) == 0x7Fu) return bit_cast<float>(sign | 0x7FC00000u);
  if (exp == 0) {  // mant * 2^-9: both factors exact, so the product is exact
    const float m = mul_rn(static_cast<float>(mant), 0x1p-9f);
    return bit_cast<float>(sign | bit_cast<uint32_t>(m));
  }
  return bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));
}

// ---- FP4 e2m1 ----------------------------------------------------------------------------------

// Returns the 4-bit code in the low nibble.
ARF_HD inline uint8_t encode_e2m1(float x) {
  const uint32_t u = bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 28) & 0x8u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7u;  // NaN -> +6, as CUDA's conversion does
  // Above 5 (the 4/6 tie, which goes to 4: even mantissa) everything becomes 6.
  if (a > 0x40A00000u) return static_cast<uint8_t>(sign | 0x7u);
  return static_cast<uint8_t>(sign | round_magnitude<1, 0>(a));
}

ARF_HD inline float decode_e2m1(uint8_t c) {
  // Magnitudes of codes 0..7, each exact in float.
  const uint32_t code = c & 0x7u;
  const float m = code < 2 ? (code == 1 ? 0.5f : 0.0f)
                           : bit_cast<float>(((code >> 1) + 126u) << 23 | (code & 1u) << 22);
  return bit_cast<float>(bit_cast<uint32_t>(m) | (c & 0x8u ? 0x80000000u : 0u));
}

// ---- UE8M0 -------------------------------------------------------------------------------------

ARF_HD inline uint8_t encode_ue8m0_ceil(float x) {
  const uint32_t a = bit_cast<uint32_t>(x) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kUe8m0Nan;
  if (a == 0x7F800000u) return 0xFEu;
  const uint32_t exp = a >> 23;
  if (exp == 0) return a <= 0x00400000u ? 0u : 1u;  // 0x00400000 is 2^-127, code 0
  const uint32_t code = exp + ((a & 0x7FFFFFu) != 0 ? 1u : 0u);
  return static_cast<uint8_t>(code > 0xFEu ? 0xFEu : code);
}

ARF_HD inline float decode_ue8m0(uint8_t e) {
  if (e == kUe8m0Nan) return bit_cast<float>(0x7FC00000u);
  if (e == 0) return bit_cast<float>(0x00400000u);  // 2^-127, a float subnormal
  return bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// 1 / decode_ue8m0(e) = 2^(127 - e), exact for every finite code. Multiplying by it gives the same
// bits as dividing by the scale (the two operations round the same real number), so a kernel may
// use mul_rn(x, ue8m0_reciprocal(e)) wherever this file says div_rn(x, scale) for a UE8M0 scale.
ARF_HD inline float ue8m0_reciprocal(uint8_t e) {
  if (e == kUe8m0Nan) return bit_cast<float>(0x7FC00000u);
  if (e == 0xFEu) return bit_cast<float>(0x00400000u);  // 2^-127
  return bit_cast<float>((254u - e) << 23);
}

// ---- scale rules -------------------------------------------------------------------------------

// How the quotient amax / 448 of a dynamic FP8 scale is taken (arfFp8ScaleRule_t, arfusion.h;
// core/quant_rules.cc asserts the values are equal).
enum class Fp8ScaleRule : int {
  kDivide = 0,           // RN(amax / 448): the IEEE quotient, the contract's default
  kTimesReciprocal = 1,  // RN(amax * RN(1 / 448)): what torch computes for `amax / 448.0` on a GPU
};

// RN(1 / 448) in fp32 (bits 0x3B124925): the constant torch multiplies by, since eager CUDA turns
// a Python-scalar divisor into a multiplication by its fp32 reciprocal and Inductor does the same.
inline constexpr float kE4m3MaxReciprocal = 1.0f / kE4m3Max;

// Dynamic FP8 scale (per token, per 1x128 group): max(amax / 448, kMinFp8Scale), the quotient
// taken by `rule`; the floor applies after it under both rules (torch's clamp_min of the
// quotient). The same floor serves both patterns so one helper serves both kernels; an all-zero
// row or group gets kMinFp8Scale (byte 110 = 2^-17 in UE8M0) and quantizes to zeros like any
// positive scale would. AITER uses 1.0 for a zero group and FlashInfer's packed UE8M0 path clamps
// at 1e-10; only groups with amax < 2^-9 see a difference, and for them ours does not use the full
// e4m3 range. NaN (never an amax of abs_max) gives kMinFp8Scale, +inf gives +inf, under both rules.
//
// An amax below 2^-10 is neither divided nor multiplied: amax / 448 < 2^-18.8, and amax * RN(1/448)
// rounds to at most 2^-10 * RN(1/448) < 2^-18.8, both under the floor 2^-17.8 (the IEEE operations
// are monotonic, so a smaller amax cannot give more); the device's IEEE division leaves its fast
// path for zero and subnormal numerators (see E4m3TensorReciprocal), and all-zero rows and groups are
// common (padding rows). tests/cpu/test_quant_formats.cc checks both rules against the plain
// formula for every bf16 and fp16 amax.
ARF_HD inline float fp8_dynamic_scale(float amax, Fp8ScaleRule rule) {
  const bool floored = amax < 0x1p-10f;
  const float a = floored ? 1.0f : amax;
  const float s = rule == Fp8ScaleRule::kTimesReciprocal ? mul_rn(a, kE4m3MaxReciprocal)
                                                         : div_rn(a, kE4m3Max);
  return !floored && s > kMinFp8Scale ? s : kMinFp8Scale;
}

// UE8M0 variant (DeepGEMM/FlashInfer): the rule's dynamic scale rounded UP to a power of two, so
// that amax / scale <= 448 still holds (tests/cpu/test_quant_formats.cc: every bf16 and fp16 amax,
// both rules). Decode with decode_ue8m0, or store it as that fp32 value.
ARF_HD inline uint8_t fp8_dynamic_scale_ue8m0(float amax, Fp8ScaleRule rule) {
  return encode_ue8m0_ceil(fp8_dynamic_scale(amax, rule));
}

// One FP8 element: saturate(x / scale). Division, not multiplication by a reciprocal, because the
// contract says norm / scale and the two differ in the last bit for non-power-of-two scales.
ARF_HD inline uint8_t quantize_e4m3(float x, float scale) { return encode_e4m3_device(div_rn(x, scale)); }

// x / scale for a DYNAMIC FP8 scale (fp8_dynamic_scale of a row's or group's amax, which the row's
// or group's |x| never exceeds) without a division: the reciprocal r = RN(1 / scale) once per row
// or group, then per element q0 = RN(x * r) and Markstein's correction
// q1 = RN(q0 + RN(x - scale * q0) * r) (two FMAs, no branch), with x's sign put back on q1 (the
// correction turns x = -0 into +0). tests/cpu/test_quant_formats.cc checks that
// encode_e4m3(e4m3_dynamic_quotient(x, ...)) == quantize_e4m3(x, scale) for every bf16 and fp16
// x and every dynamic scale of an amax >= |x| under EACH Fp8ScaleRule (NaN x included): the
// quotients themselves are equal wherever they are not far below e4m3's smallest subnormal. The
// exactness rests on that enumeration of the scales the rules make, not on an argument for any
// float scale, so a new way of making the scale needs the check extended to it. An infinite scale (an
// infinite amax) has r = 0 and the remainder's -scale replaced by -0 (inf * 0 would be NaN):
// q1 is then x * 0, the signed zero x / inf gives, and NaN for infinite x, as inf / inf.
// Not for per-tensor scales (any float from the caller): no such check covers them.
struct E4m3Reciprocal {
  float recip;      // RN(1 / scale), 0 for an infinite scale
  float neg_scale;  // -scale, -0 for an infinite scale
};

ARF_HD inline E4m3Reciprocal e4m3_reciprocal(float scale) {
  const bool finite = scale <= 0x1.fffffep127f;
  return {rcp_rn(scale), finite ? -scale : -0.0f};
}

ARF_HD inline float e4m3_dynamic_quotient(float x, const E4m3Reciprocal& r) {
  const float q0 = mul_rn(x, r.recip);
  const float q1 = fma_rn(fma_rn(r.neg_scale, q0, x), r.recip, q0);
  return bit_cast<float>(bit_cast<uint32_t>(q1) | (bit_cast<uint32_t>(x) & 0x80000000u));
}

// x / scale for a caller's PER-TENSOR scale (any float) without a division: x and |scale| are
// first multiplied by one power of two that brings |scale| to [1, 2) (to [2^-22, 1) for a
// subnormal scale; x's factor carries the scale's sign), which leaves the quotient's value as it
// was; then the reciprocal
// r = RN(1 / scale') once per CTA and per element E4m3Reciprocal's q0 = RN(x' * r) and Markstein's
// correction. q1 == RN(x / scale) bit for bit, for every bf16 and fp16 x, wherever |x / scale| is
// in [2^-11, 1024):
// - for significands alone (x and scale in [1, 2)) it is exact for all 2^23 scale significands x
//   all 2^10 fp16 significands (bf16's 7 bits are among them): tests/cpu/test_e4m3_tensor_reciprocal.cc
//   enumerates them (8.6e9 pairs; without the correction 27% differ);
// - scale' is in [2^-22, 2), so x' is a normal number in that quotient range and every
//   intermediate scales by the same power of two as x' / scale': r, q0 and q1 are normal, the
//   remainder x' - scale' * q0 is either exact (a multiple of 2^(e(x') - 47) >= 2^-149,
//   representable even below 2^-126) or rounded at >= 2^(e(x') - 23), a normal number, as the
//   significand-level check rounds it.
// Outside that range both give the same code: below 2^-11 a signed zero (|q1| stays below 2^-10;
// an x' that underflows while prescaled is below 2^-126 either way); from 1024 on, saturation
// (a q0 >= 1024, inf included, is replaced by 1024 before the correction, so no inf * 0 or
// inf - inf makes a NaN; an x' that overflows while prescaled had a quotient above 2^127). A NaN x
// stays NaN (the clamp's comparison is false). The special scales are the reciprocal's own
// products: a zero scale has r = inf and scale' = 0 (x / 0 = inf, 0 / 0 = NaN), an infinite one
// r = 0 and scale' = 0 (x / inf = 0, inf / inf = NaN, where -inf * 0 would have made every
// remainder NaN), NaN r = NaN; a negative scale is a negative prescale, which gives x' the sign
// of the quotient. Why no division: the device's IEEE division (__fdiv_rn) is ~8 instructions and
// a check on its fast path, and it leaves that path for zero and subnormal numerators, where one
// such lane sends its whole warp through a long subroutine with spills (zeros are ordinary in a
// norm's output: padding rows, zero gamma entries; with 1 in 64 of them the quantized epilogues
// ran ~28% of their instructions there, by Nsight Compute's per-instruction counts).
struct E4m3TensorReciprocal {
  float prescale;  // the power of two that brings |scale| to scale', with the scale's sign; +-1
                   // for 0, inf and NaN
  float scale;     // |scale| * |prescale|: in [2^-22, 2), or 0 for 0 and inf
  float recip;     // RN(1 / scale'): inf for a zero scale, 0 for an infinite one, NaN for NaN
};

ARF_HD inline E4m3TensorReciprocal e4m3_tensor_reciprocal(float scale) {
  const uint32_t u = bit_cast<uint32_t>(scale);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t sign = u & 0x80000000u;
  const uint32_t biased = a >> 23;
  const float one = bit_cast<float>(sign | 0x3F800000u);
  if (a == 0) return {one, 0.0f, bit_cast<float>(0x7F800000u)};
  if (biased == 255) return {one, 0.0f, a == 0x7F800000u ? 0.0f : bit_cast<float>(a)};
  // 2^(127 - biased) for a normal scale (2^-127, the one subnormal power, when biased is 254),
  // 2^127 for a subnormal one.
  const uint32_t prescale_bits = biased == 0 ? 254u << 23 : biased == 254 ? 0x00400000u : (254u - biased) << 23;
  return {bit_cast<float>(sign | prescale_bits), mul_rn(bit_cast<float>(a), bit_cast<float>(prescale_bits)),
          rcp_rn(mul_rn(bit_cast<float>(a), bit_cast<float>(prescale_bits)))};
}

ARF_HD inline float e4m3_tensor_quotient(float x, const E4m3TensorReciprocal& r) {
  const uint32_t u = bit_cast<uint32_t>(mul_rn(x, r.prescale));  // exact but where it cannot matter
  const float ax = bit_cast<float>(u & 0x7FFFFFFFu);
  const float q0 = mul_rn(ax, r.recip);
  const float q0c = q0 >= 1024.0f ? 1024.0f : q0;  // a select: NaN passes through
  const float q1 = fma_rn(fma_rn(-r.scale, q0c, ax), r.recip, q0c);
  return bit_cast<float>(bit_cast<uint32_t>(q1) | (u & 0x80000000u));  // the sign of x / scale
}

// NVFP4 block of 16 (TRT-LLM/FlashInfer cvt_warp_fp16_to_fp4 recipe, with exact IEEE operations
// where they use rcp.approx): with the fp32 global scale gs (typically 448 * 6 / tensor amax),
//   sf   = e4m3((amax / 6) * gs)           stored per block, unsigned (sf >= 0, so bit 7 is 0)
//   mult = sf == 0 ? 0 : gs / float(sf)    the per-element multiplier
//   q    = e2m1(x * mult)
// Dequantization: x ~= float(q) * float(sf) / gs. Rounding sf to nearest can round it down, so
// x * mult may exceed 6 slightly; e2m1 saturation takes care of that.
struct Nvfp4BlockScale {
  uint8_t sf;  // e4m3 code
  float mult;
};

ARF_HD inline Nvfp4BlockScale nvfp4_block_scale(float amax, float global_scale) {
  Nvfp4BlockScale s;
  // Zero is not divided (the division's slow path, see E4m3TensorReciprocal): +-0 / 6 is +-0.
  const float amax_over_max = amax == 0.0f ? amax : div_rn(amax == 0.0f ? 1.0f : amax, kE2m1Max);
  s.sf = encode_e4m3(mul_rn(amax_over_max, global_scale));
  const float sf = decode_e4m3(s.sf);
  s.mult = sf == 0.0f ? 0.0f : div_rn(global_scale, sf == 0.0f ? 1.0f : sf);
  return s;
}

// MXFP4 block of 32 (OCP MX v1.0, section 6.3): shared exponent X = floor(log2(amax)) - 2, where 2
// is e2m1's largest exponent, clamped to UE8M0's [-127, 127]; code = X + 127. Elements are
// e2m1(x / 2^X) = e2m1(x * ue8m0_reciprocal(code)). amax / 2^X lies in [4, 8), so values above 6
// saturate: this is the spec's choice. (TRT-LLM's MXFP4 instead rounds amax / 6 up to a power of
// two, which never saturates but can leave the top code unused.) amax 0 or below 2^-124 gives code
// 0; an infinite amax gives the NaN code 0xFF, marking a broken row.
ARF_HD inline uint8_t mxfp4_scale_code(float amax) {
  const uint32_t a = bit_cast<uint32_t>(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return kUe8m0Nan;
  const uint32_t exp = a >> 23;  // floor(log2(amax)) + 127 for normal amax
  return static_cast<uint8_t>(exp > 2 ? exp - 2 : 0);
}

// One FP4 element given the block's multiplier (NVFP4 mult or MXFP4 ue8m0_reciprocal).
ARF_HD inline uint8_t quantize_e2m1(float x, float mult) { return encode_e2m1(mul_rn(x, mult)); }

}  // namespace arf::quant
