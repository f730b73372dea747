// Self-consistency rules for the quantized outputs (quant_out, scale_out) against the library's
// OWN norm_out, host+device. Restated from the contracts in arfusion.h (arfPattern_t) and the
// format rules the project documents (src/common/quant_formats.h, quant_layout.h; not included:
// this is an outside program).
//
// Why self-consistency and not a bit-exact reference: norm_out is already checked against the
// double reference, and a protocol slip (the thing this soak hunts) corrupts norm_out as well. So
// these checks stay simple and sound:
//  - a code is accepted when its value lies within HALF A QUANTUM of the scaled value x = norm /
//    scale (FP8) or y = norm * mult (FP4), computed with the same fp32 operations the contract
//    names — precisely: no other value of the format is strictly nearer (so at a binade edge the
//    smaller spacing counts); beyond the format's range only the saturated code; a nonzero code
//    carries x's sign;
//  - dynamic scales follow their rule exactly (one IEEE division and integer steps):
//      FP8 per-token / per-group fp32: max(amax / 448, 2^-9 / 448);
//      UE8M0: that value rounded UP to a power of two (code = exponent + (mantissa != 0));
//      MXFP4: code = floor(log2(amax)) - 2 + 127 clamped at 0 (biased exponent - 2);
//      NVFP4: sf (e4m3, unsigned) within half an e4m3 quantum of (amax / 6) * global_scale,
//      saturating at 448; the element multiplier is global_scale / sf (0 when sf is 0);
//  - scale padding (positions outside [T, cols] of the padded layout) is zero.
#pragma once

#include <cstdint>

#include "hd.h"

namespace arf::stress {

// ---- decoders ------------------------------------------------------------------------------------

STRESS_HD inline float decode_e4m3(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t exp = (c >> 3) & 0xFu, mant = c & 0x7u;
  if ((c & 0x7Fu) == 0x7Fu) return u2f(sign | 0x7FC00000u);  // NaN
  if (exp == 0) return u2f(sign | f2u(mul_rn(static_cast<float>(mant), 0x1p-9f)));
  return u2f(sign | ((exp + 120u) << 23) | (mant << 20));
}

STRESS_HD inline float decode_e2m1(uint8_t nibble) {
  constexpr float kMagnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitudes[nibble & 0x7u];
  return (nibble & 0x8u) ? -m : m;
}

STRESS_HD inline float decode_ue8m0(uint8_t e) {
  if (e == 0xFFu) return u2f(0x7FC00000u);
  if (e == 0) return u2f(0x00400000u);  // 2^-127
  return u2f(static_cast<uint32_t>(e) << 23);
}

// ---- element rules ---------------------------------------------------------------------------------

// The element rule, "within half a quantum" made exact at binade edges: a code is accepted when
// no other value of the format is strictly nearer to the scaled value, i.e. |x| lies between the
// midpoints to the code's neighbours (ties accepted either way). The largest magnitude code takes
// everything above its lower midpoint (saturation), zero everything below half the smallest
// nonzero value (either sign). A nonzero code must carry x's sign.
template <class Magnitude>
STRESS_HD inline bool nearest_code_ok(uint32_t magnitude_code, uint32_t max_code, float ax, Magnitude value) {
  const float v = value(magnitude_code);
  const float lo = magnitude_code == 0 ? 0.0f : mul_rn(add_rn(value(magnitude_code - 1), v), 0.5f);
  if (ax < lo) return false;
  if (magnitude_code == max_code) return true;
  return ax <= mul_rn(add_rn(v, value(magnitude_code + 1)), 0.5f);
}

// Code c for the scaled value x (x = norm / scale in fp32). e4m3: magnitudes 0x00..0x7E (0x7F NaN).
STRESS_HD inline bool e4m3_code_ok(uint8_t c, float x) {
  if (is_nan_f(x)) return (c & 0x7Fu) == 0x7Fu;
  const uint32_t m = c & 0x7Fu;
  if (m == 0x7Fu) return false;
  const bool negative = (f2u(x) >> 31) != 0;
  if (m != 0 && ((c & 0x80u) != 0) != negative) return false;
  return nearest_code_ok(m, 0x7Eu, fabs_f(x), [](uint32_t k) { return decode_e4m3(static_cast<uint8_t>(k)); });
}

// e2m1 nibble for y (y = norm * multiplier): magnitudes 0..7 = 0, 0.5, 1, 1.5, 2, 3, 4, 6.
STRESS_HD inline bool e2m1_code_ok(uint8_t nibble, float y) {
  if (is_nan_f(y)) return (nibble & 0xFu) == 0x7u;  // NaN -> +6
  const uint32_t m = nibble & 0x7u;
  const bool negative = (f2u(y) >> 31) != 0;
  if (m != 0 && ((nibble & 0x8u) != 0) != negative) return false;
  return nearest_code_ok(m, 7u, fabs_f(y), [](uint32_t k) { return decode_e2m1(static_cast<uint8_t>(k)); });
}

// ---- scale rules -----------------------------------------------------------------------------------

inline constexpr float kE4m3Max = 448.0f;
inline constexpr float kMinFp8Scale = 1.0f / (448.0f * 512.0f);  // 2^-9 / 448

STRESS_HD inline float fp8_dynamic_scale(float amax) {
  const float s = div_rn(amax, kE4m3Max);
  return s > kMinFp8Scale ? s : kMinFp8Scale;
}

STRESS_HD inline uint8_t ue8m0_ceil(float positive_normal) {
  const uint32_t a = f2u(positive_normal) & 0x7FFFFFFFu;
  const uint32_t code = (a >> 23) + ((a & 0x7FFFFFu) != 0 ? 1u : 0u);
  return static_cast<uint8_t>(code > 0xFEu ? 0xFEu : code);
}

STRESS_HD inline uint8_t mxfp4_scale_code(float amax) {
  const uint32_t a = f2u(amax) & 0x7FFFFFFFu;
  if (a >= 0x7F800000u) return 0xFFu;
  const uint32_t exp = a >> 23;
  return static_cast<uint8_t>(exp > 2 ? exp - 2 : 0);
}

// 2^(127 - e): multiplying by it is dividing by the UE8M0 scale e (exact).
STRESS_HD inline float ue8m0_reciprocal(uint8_t e) {
  if (e == 0xFFu) return u2f(0x7FC00000u);
  if (e == 0xFEu) return u2f(0x00400000u);
  return u2f(static_cast<uint32_t>(254u - e) << 23);
}

// NVFP4 block scale code sf for the block's amax and the global scale gs.
STRESS_HD inline bool nvfp4_scale_ok(uint8_t sf, float amax, float gs) {
  if (sf & 0x80u) return false;  // stored unsigned
  const float target = mul_rn(div_rn(amax, 6.0f), gs);
  return e4m3_code_ok(sf, target);
}
STRESS_HD inline float nvfp4_multiplier(uint8_t sf, float gs) {
  const float s = decode_e4m3(sf);
  return s == 0.0f ? 0.0f : div_rn(gs, s);
}

// ---- scale layouts (arfScaleLayout_t) ----------------------------------------------------------------
// T tokens, `cols` scales per token. Offsets in bytes. fp32 = 4-byte elements, else 1-byte codes.
//  row-major [T, cols]; MN-major (FP8 per-group) [cols, Tp], Tp = round_up(T, 4), packed UE8M0 as
//  4 codes per 32-bit word along cols: word (c / 4) * Tp + t, byte c % 4; swizzled 128x4 (FP4):
//  512-byte tiles of 128 rows x 4 columns, row-tile-major, (t % 32) * 16 + ((t % 128) / 32) * 4 + c % 4.

enum ScaleLayoutId : uint32_t { kLayoutRowMajor = 0, kLayoutMnMajor = 1, kLayoutSwizzled = 2 };

STRESS_HD constexpr int64_t ceil_div64(int64_t x, int64_t m) { return (x + m - 1) / m; }
STRESS_HD constexpr int64_t round_up64(int64_t x, int64_t m) { return ceil_div64(x, m) * m; }

STRESS_HD inline int64_t scale_offset(uint32_t layout, bool fp32, int64_t t, int64_t c, int64_t tokens,
                                     int64_t cols) {
  const int64_t esize = fp32 ? 4 : 1;
  if (layout == kLayoutMnMajor) {
    const int64_t tp = round_up64(tokens, 4);
    return fp32 ? (c * tp + t) * 4 : ((c / 4) * tp + t) * 4 + c % 4;
  }
  if (layout == kLayoutSwizzled) {
    const int64_t col_tiles = ceil_div64(cols, 4);
    const int64_t tile = (t / 128) * col_tiles + c / 4;
    return tile * 512 + (t % 32) * 16 + ((t % 128) / 32) * 4 + c % 4;
  }
  return (t * cols + c) * esize;
}

// Padded buffer size of a layout (what arfScaleBufferBytes returns for it).
STRESS_HD inline int64_t scale_bytes(uint32_t layout, bool fp32, int64_t tokens, int64_t cols) {
  if (layout == kLayoutMnMajor) {
    const int64_t tp = round_up64(tokens, 4);
    return fp32 ? cols * tp * 4 : ceil_div64(cols, 4) * tp * 4;
  }
  if (layout == kLayoutSwizzled) return round_up64(tokens, 128) * round_up64(cols, 4);
  return tokens * cols * (fp32 ? 4 : 1);
}

// Whether byte b of the buffer belongs to a valid (t < T, c < cols) scale; padding otherwise.
STRESS_HD inline bool scale_byte_is_valid(uint32_t layout, bool fp32, int64_t b, int64_t tokens,
                                         int64_t cols) {
  if (layout == kLayoutMnMajor) {
    const int64_t tp = round_up64(tokens, 4);
    const int64_t word = b / 4;
    if (fp32) return word % tp < tokens;
    const int64_t c = (word / tp) * 4 + b % 4;
    return word % tp < tokens && c < cols;
  }
  if (layout == kLayoutSwizzled) {
    const int64_t col_tiles = ceil_div64(cols, 4);
    const int64_t tile = b / 512, in_tile = b % 512;
    const int64_t t = (tile / col_tiles) * 128 + ((in_tile % 16) / 4) * 32 + in_tile / 16;
    const int64_t c = (tile % col_tiles) * 4 + in_tile % 4;
    return t < tokens && c < cols;
  }
  return b < tokens * cols * (fp32 ? 4 : 1);
}

}  // namespace arf::stress
