// The numerics contract of include/arfusion/arfusion.h, restated for the soak's checker
// (host+device, so the CPU tests run exactly what the check kernel runs).
//
// Contract (arfusion.h, docs/architecture.md "Numerics"), per element:
//  - all-reduce: canonicalise every rank's input (-0.0 -> +0.0), sum in fp32 over ranks 0..N-1 in
//    rank order, round to the dtype (nearest even), canonicalise again. Bitwise.
//  - residual_out = round(float(allreduce) + float(residual_in)); = allreduce when residual_in is
//    NULL. Bitwise.
//  - norm_out: y = residual_out, s = rsqrt(mean(y^2) + eps), g = gamma (+1). The library computes
//    in fp32, we compute the exact value in double, so it is accepted when it is bitwise
//    round(exact) or within 1 ulp of the dtype at |exact| plus 1e-6 ABSOLUTE (the rule of the
//    project's CPU reference, norm_within_tolerance; restated in norm_within_tolerance below).
//    arfNormRoundOnce: exact = y*s*g. arfNormRoundBeforeWeight: exact = round_dtype(y*s) * g; the
//    intermediate rounding of y*s (fp32 in the library, double here) may land on the other
//    neighbour when y*s lies next to a midpoint, so both intermediates that a relative error of
//    kIntermediateSlack can produce are candidates (before_weight_candidates).
#pragma once

#include <math.h>
#include <cstdint>

#include "hd.h"

namespace arf::stress {

enum class Act : uint8_t { kBf16 = 0, kFp16 = 1 };

// Bit tests instead of std::isnan/isinf, which are host functions in libstdc++.
STRESS_HD inline bool is_nan_d(double d) { return (d2u(d) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }
STRESS_HD inline bool is_finite_d(double d) {
  return (d2u(d) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}

// ---- 16-bit formats ----------------------------------------------------------------------------

STRESS_HD inline float bf16_to_float(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

STRESS_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t u = f2u(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);  // nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

STRESS_HD inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return u2f(sign | 0x7F800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return u2f(sign | ((exp + 112u) << 23) | (mant << 13));
  // subnormal: mant * 2^-24, exact in float
  return u2f(sign | f2u(mul_rn(static_cast<float>(mant), 0x1p-24f)));
}

STRESS_HD inline uint16_t float_to_fp16(float f) {
  const uint32_t u = f2u(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: to inf
  if (a >= 0x38800000u) {                                            // fp16 normal (>= 2^-14)
    a += 0xFFFu + ((a >> 13) & 1u);
    a -= 0x38000000u;  // exponent bias 127 -> 15
    return static_cast<uint16_t>(sign | (a >> 13));
  }
  // fp16 subnormal: code = round(|x| / 2^-24); |x| = m * 2^(e-150), so code = m >> (126 - e).
  const uint32_t e = a >> 23;
  if (e < 102) return static_cast<uint16_t>(sign);  // below 2^-25 (incl. float subnormals)
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 .. 24
  uint32_t code = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (code & 1u))) ++code;
  return static_cast<uint16_t>(sign | code);
}

STRESS_HD inline float to_float(uint16_t bits, Act dt) {
  return dt == Act::kFp16 ? fp16_to_float(bits) : bf16_to_float(bits);
}
STRESS_HD inline uint16_t from_float(float f, Act dt) {
  return dt == Act::kFp16 ? float_to_fp16(f) : float_to_bf16(f);
}
STRESS_HD inline uint16_t canonical(uint16_t bits) { return bits == 0x8000u ? 0 : bits; }

// Double -> dtype with one rounding: round to odd into float (exact for the final rounding since
// float has >= 2 more mantissa bits than bf16/fp16), then nearest-even to the dtype.
STRESS_HD inline float double_to_float_round_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d && is_finite_d(d)) {
    uint32_t u = f2u(f);
    if (::fabs(static_cast<double>(f)) > ::fabs(d)) --u;  // truncate toward zero
    f = u2f(u | 1u);
  }
  return f;
}
STRESS_HD inline uint16_t round_double(double d, Act dt) {
  return from_float(double_to_float_round_odd(d), dt);
}

// ---- the all-reduce and residual rules ---------------------------------------------------------

// One step of the rank-order fp32 sum: acc + canonical(x_r).
STRESS_HD inline float sum_step(float acc, uint16_t x, Act dt) {
  return add_rn(acc, to_float(canonical(x), dt));
}
STRESS_HD inline uint16_t round_sum(float acc, Act dt) { return canonical(from_float(acc, dt)); }
STRESS_HD inline uint16_t residual_rule(uint16_t ar, uint16_t residual, Act dt) {
  return from_float(add_rn(to_float(ar, dt), to_float(residual, dt)), dt);
}

// ---- norm ----------------------------------------------------------------------------------------

// |got - exact| <= ulp_dtype(|exact|) + 1e-6 absolute; ulp = 2^(floor(log2|exact|) - mantissa
// bits), never below the dtype's subnormal spacing. NaN only matches NaN, inf only itself.
STRESS_HD inline bool norm_within_tolerance(uint16_t got_bits, double exact, Act dt) {
  const double got = static_cast<double>(to_float(got_bits, dt));
  if (is_nan_d(exact) || is_nan_d(got)) return is_nan_d(exact) && is_nan_d(got);
  if (!is_finite_d(exact) || !is_finite_d(got)) return got == exact;
  const int mantissa_bits = dt == Act::kFp16 ? 10 : 7;
  const int min_exp = dt == Act::kFp16 ? -24 : -133;
  int exp2 = 0;
  ::frexp(exact, &exp2);  // |exact| in [2^(exp2-1), 2^exp2)
  int ulp_exp = exp2 - 1 - mantissa_bits;
  if (exact == 0.0 || ulp_exp < min_exp) ulp_exp = min_exp;
  return ::fabs(got - exact) <= ::ldexp(1.0, ulp_exp) + 1e-6;
}

// Accepted for an exact value: bitwise its rounding, or within the tolerance.
STRESS_HD inline bool norm_accept(uint16_t got_bits, double exact, Act dt) {
  return got_bits == round_double(exact, dt) || norm_within_tolerance(got_bits, exact, dt);
}

// Relative error the library's fp32 y*s may have against the double one: the fp32 sum of squares
// in column order (typically ~sqrt(hidden) fp32 ulps, 2^-17 at hidden 16384), the fp32 rsqrt
// (up to 2 ulps) and the product. An fp32 implementation of the contract differs by more than
// 2^-22 (test_numerics.cc); 2^-12 leaves a wide margin. It only decides which intermediates are
// candidates: both are a neighbour of the exact value, so garbage cannot pass through it.
inline constexpr double kIntermediateSlack = 0x1p-12;

struct Candidates {
  double a, b;  // the exact values round(q)*g for the two intermediates (equal when unambiguous)
};

// arfNormRoundBeforeWeight: exact = round_dtype(y*s) * g, for the intermediates that y*s and a
// value within kIntermediateSlack of it round to.
STRESS_HD inline Candidates before_weight_candidates(double ys, double g, Act dt) {
  const double lo = ys * (1.0 - kIntermediateSlack), hi = ys * (1.0 + kIntermediateSlack);
  const double za = static_cast<double>(to_float(round_double(lo, dt), dt));
  const double zb = static_cast<double>(to_float(round_double(hi, dt), dt));
  return {za * g, zb * g};
}

// The exact norm of one element, in double: y * s * g (round once) — s = 1 / sqrt(mean + eps).
STRESS_HD inline double rms_scale(double sum_squares, int64_t hidden, float eps) {
  return 1.0 / ::sqrt(sum_squares / static_cast<double>(hidden) + static_cast<double>(eps));
}

// The whole norm rule for one element: y (residual_out value), s (rms_scale), g (gamma value,
// +1 already applied in double), the rounding mode (0 once, 1 before weight).
STRESS_HD inline bool norm_element_ok(uint16_t got, double y, double s, double g, int before_weight,
                                     Act dt) {
  if (!before_weight) return norm_accept(got, y * s * g, dt);
  const Candidates c = before_weight_candidates(y * s, g, dt);
  return norm_accept(got, c.a, dt) || norm_accept(got, c.b, dt);
}

// The want bits reported for a wrong norm element: the rounding of the (first) exact value.
STRESS_HD inline uint16_t norm_want_bits(double y, double s, double g, int before_weight, Act dt) {
  if (!before_weight) return round_double(y * s * g, dt);
  return round_double(before_weight_candidates(y * s, g, dt).a, dt);
}

}  // namespace arf::stress
