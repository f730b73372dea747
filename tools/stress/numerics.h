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

// ---- sandwich calls (post_gamma set) -------------------------------------------------------------
//
// Contract (arfusion.h, Numerics): h = the norm of the rounded sum by the norm_out rules with
// post_gamma for gamma (same eps, gamma_plus_one, norm_rounding), rounded to the dtype, within the
// same tolerance as norm_out; residual_out = round(float(h) + float(residual_in)) from that h (= h
// without residual_in). h is written nowhere, so residual_out is accepted when SOME h the norm rule
// accepts (norm_element_ok with the sum for y and post_gamma for g) gives it bitwise. No interval
// shortcut: when h's spacing is coarser than residual_out's, values between two reachable results
// are not reachable and are rejected.

// Value order of the non-NaN 16-bit values of either dtype as an integer: -Inf lowest, -0 just
// below +0, +Inf highest (both dtypes are sign-magnitude).
STRESS_HD inline uint32_t order_key16(uint16_t b) {
  return (b & 0x8000u) ? 0x7FFFu - (b & 0x7FFFu) : 0x8000u + b;
}
STRESS_HD inline uint16_t from_order_key16(uint32_t k) {
  return k >= 0x8000u ? static_cast<uint16_t>(k - 0x8000u) : static_cast<uint16_t>(0x8000u | (0x7FFFu - k));
}
STRESS_HD inline bool is_nan16(uint16_t b, Act dt) {
  return dt == Act::kFp16 ? (b & 0x7FFFu) > 0x7C00u : (b & 0x7FFFu) > 0x7F80u;
}

// residual_out for a given h: the residual rule with h in the sum's place.
STRESS_HD inline uint16_t sandwich_residual_of(uint16_t h, bool residual_null, uint16_t residual, Act dt) {
  return residual_null ? h : residual_rule(h, residual, dt);
}

// Whether `got` is the residual_out of some h with norm_accept(h, exact): those h are round(exact)
// and the dtype values within norm_within_tolerance of exact, consecutive in value order, and
// residual_out is non-decreasing in h (one fp32 add, one rounding), so a binary search over that
// run finds the smallest h whose residual_out is >= got, and got is reachable iff it equals it.
STRESS_HD inline bool sandwich_residual_reachable(uint16_t got, double exact, bool residual_null,
                                                  uint16_t residual, Act dt) {
  const uint16_t nearest = round_double(exact, dt);
  if (sandwich_residual_of(nearest, residual_null, residual, dt) == got) return true;
  if (!is_finite_d(exact) || is_nan16(got, dt)) return false;  // NaN/Inf h: round(exact) alone
  // The run of accepted h: start at round(exact), step outwards while the neighbour is accepted.
  // The tolerance spans at most a few dtype steps above 2^-20 or so; below that the 1e-6 absolute
  // part spans many, so the ends are found by bisection of the key distance instead of stepping.
  const uint32_t centre = order_key16(nearest);
  const uint32_t lowest = order_key16(dt == Act::kFp16 ? 0xFC00u : 0xFF80u);   // -Inf
  const uint32_t highest = order_key16(dt == Act::kFp16 ? 0x7C00u : 0x7F80u);  // +Inf
  uint32_t lo = centre, hi = centre;
  {  // lo: the lowest accepted key at or below centre (accepted keys below centre are consecutive)
    uint32_t step = 1;
    while (lo >= lowest + step && norm_within_tolerance(from_order_key16(lo - step), exact, dt)) {
      lo -= step;
      step *= 2;
    }
    for (; step > 0; step /= 2) {
      if (lo >= lowest + step && norm_within_tolerance(from_order_key16(lo - step), exact, dt)) lo -= step;
    }
  }
  {
    uint32_t step = 1;
    while (hi + step <= highest && norm_within_tolerance(from_order_key16(hi + step), exact, dt)) {
      hi += step;
      step *= 2;
    }
    for (; step > 0; step /= 2) {
      if (hi + step <= highest && norm_within_tolerance(from_order_key16(hi + step), exact, dt)) hi += step;
    }
  }
  // Smallest key in [lo, hi] whose residual_out is >= got in value order.
  const uint32_t want = order_key16(got);
  uint32_t a = lo, b = hi + 1;  // answer in [a, b]; b = none
  while (a < b) {
    const uint32_t m = a + (b - a) / 2;
    if (order_key16(sandwich_residual_of(from_order_key16(m), residual_null, residual, dt)) >= want) {
      b = m;
    } else {
      a = m + 1;
    }
  }
  return a <= hi && sandwich_residual_of(from_order_key16(a), residual_null, residual, dt) == got;
}

// The whole sandwich rule for one residual_out element: ar (the rounded sum's value), s_h
// (rms_scale of the rounded sum's row), pg (post_gamma value, +1 already applied in double), the
// rounding mode (0 once, 1 before weight: both intermediates, as norm_element_ok), the residual.
STRESS_HD inline bool sandwich_residual_ok(uint16_t got, double ar, double s_h, double pg, int before_weight,
                                           bool residual_null, uint16_t residual, Act dt) {
  if (!before_weight) return sandwich_residual_reachable(got, ar * s_h * pg, residual_null, residual, dt);
  const Candidates c = before_weight_candidates(ar * s_h, pg, dt);
  return sandwich_residual_reachable(got, c.a, residual_null, residual, dt) ||
         sandwich_residual_reachable(got, c.b, residual_null, residual, dt);
}

// The want bits reported for a wrong sandwich residual_out: from the rounding of h's exact value.
STRESS_HD inline uint16_t sandwich_residual_want_bits(double ar, double s_h, double pg, int before_weight,
                                                      bool residual_null, uint16_t residual, Act dt) {
  return sandwich_residual_of(norm_want_bits(ar, s_h, pg, before_weight, dt), residual_null, residual, dt);
}

}  // namespace arf::stress
