// CPU reference of the numerics contract (docs/architecture.md): fixed-order fp32 sum over ranks, dtype
// rounding of the sum and of residual_out, RMSNorm in double. Conversions use integer bit
// manipulation rather than _Float16/__bf16, so their rounding depends on neither the compiler nor
// libgcc. The sums assume the default FP environment (round-to-nearest, no FTZ/DAZ).
#include "reference/cpu_reference.h"

#include <algorithm>
#include <cfloat>
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "base/bit_cast.h"

// The contract's sum is strictly fp32: no x87 excess precision and no contraction into FMA. x86-64
// SSE evaluates float in float (FLT_EVAL_METHOD 0); refuse to build where that is not so rather
// than sprinkle volatile. Contraction only matters for the double-precision norm (a*b+c), but the
// reference should not change with -march either.
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "cpu_reference.cc needs FLT_EVAL_METHOD == 0 (e.g. x86-64 SSE, AArch64)"
#endif
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace arf::ref {
namespace {

// double -> float rounding to odd: truncate, then set the last bit if anything was lost. A value
// rounded to odd with >= 2 more bits than the target rounds to nearest-even exactly as the original
// would, so norm_out = round(norm_exact) has no double-rounding error.
float double_to_float_round_odd(double d) {
  if (std::isnan(d) || std::isinf(d)) return static_cast<float>(d);
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return bit_cast<float>(bit_cast<uint32_t>(f) | 1u);
}

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// gamma is in.gamma or in.post_gamma (both of in.gamma_dtype).
float gamma_at(const FusedInputs& in, const void* gamma, int64_t col) {
  if (in.gamma_dtype == DType::kFp32) return static_cast<const float*>(gamma)[col];
  return to_float(static_cast<const uint16_t*>(gamma)[col], in.gamma_dtype);
}

// One row's residual_out is already rounded; the norm reads it back as float, as the kernel does.
// norm_rounding 1: the intermediate t = y * s rounded to the dtype, both the nearest value and
// the neighbour on the other side of the exact t (see FusedOutputs::norm_alt).
struct Intermediate {
  double nearest;
  double other;
};
Intermediate round_intermediate(double t, DType dtype) {
  const uint16_t near_bits = from_float(double_to_float_round_odd(t), dtype);
  const double nearest = to_float(near_bits, dtype);
  if (nearest == t || std::isnan(t) || std::isinf(nearest)) return {nearest, nearest};
  // The dtype neighbour across t: one step of the bit pattern away from zero or towards it.
  const bool away = std::fabs(nearest) < std::fabs(t);
  uint16_t other_bits = static_cast<uint16_t>(away ? near_bits + 1 : near_bits - 1);
  if ((near_bits & 0x7FFFu) == 0) other_bits = static_cast<uint16_t>((t < 0 ? 0x8000u : 0u) | 1u);
  return {nearest, static_cast<double>(to_float(other_bits, dtype))};
}

// The norm of one rounded row (residual_out, or for the sandwich's post-norm the all-reduce) with
// `gamma` (in.gamma or in.post_gamma).
void reference_norm_row(const FusedInputs& in, const void* gamma, const uint16_t* residual_row,
                        uint16_t* norm_row, double* exact_row, double* alt_row) {
  double sum_sq = 0.0;
  for (int64_t c = 0; c < in.hidden; ++c) {
    const double x = to_float(residual_row[c], in.dtype);
    sum_sq += x * x;
  }
  const double mean_sq = sum_sq / static_cast<double>(in.hidden);
  const double inv_rms = 1.0 / std::sqrt(mean_sq + static_cast<double>(in.eps));
  for (int64_t c = 0; c < in.hidden; ++c) {
    const double g = static_cast<double>(gamma_at(in, gamma, c)) + static_cast<double>(in.gamma_offset);
    const double y = static_cast<double>(to_float(residual_row[c], in.dtype));
    double exact = y * inv_rms * g;
    if (in.norm_rounding != 0) {
      const Intermediate t = round_intermediate(y * inv_rms, in.dtype);
      exact = t.nearest * g;
      if (alt_row != nullptr) alt_row[c] = t.other * g;
    } else if (alt_row != nullptr) {
      alt_row[c] = exact;
    }
    exact_row[c] = exact;
    norm_row[c] = from_float(double_to_float_round_odd(exact), in.dtype);
  }
}

std::string describe_bits(uint16_t bits) {
  // The comparison functions do not know the dtype, so show both readings.
  char buf[96];
  std::snprintf(buf, sizeof(buf), "0x%04x (bf16 %.9g / fp16 %.9g)", bits, bf16_to_float(bits),
                fp16_to_float(bits));
  return buf;
}

}  // namespace

float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) u |= 0x00400000u;  // quiet
  return bit_cast<float>(u);
}

uint16_t float_to_bf16(float value) {
  const uint32_t u = bit_cast<uint32_t>(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncation could clear every payload bit and turn NaN into Inf: force the quiet bit.
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Nearest-even: add just under half an ulp, plus one when the kept lsb is odd. Carries into the
  // exponent are correct (the largest finite values round to Inf).
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0x1F) {
    if (mant == 0) return bit_cast<float>(sign | 0x7F800000u);
    return bit_cast<float>(sign | 0x7FC00000u | (mant << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in float (which has 8 more exponent bits).
    const float magnitude = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -magnitude : magnitude;
  }
  return bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_fp16(float value) {
  const uint32_t u = bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  // 65520 = 65504 + half an ulp; the tie goes to the even neighbour, which is Inf.
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {  // >= 2^-14: normal in fp16
    const uint32_t rebiased = a - (112u << 23);
    const uint32_t rounded = rebiased + 0xFFFu + ((rebiased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Subnormal in fp16: result = round(value / 2^-24). Float subnormals (exp 0) are far below
  // 2^-25 and round to zero.
  const uint32_t exp = a >> 23;
  if (exp == 0) return sign;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // value = mant * 2^(exp - 150)
  const uint32_t shift = 126u - exp;                  // value / 2^-24 = mant >> shift
  if (shift > 24) return sign;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may become 0x400: the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float to_float(uint16_t bits, DType dtype) {
  return dtype == DType::kFp16 ? fp16_to_float(bits) : bf16_to_float(bits);
}

uint16_t from_float(float value, DType dtype) {
  return dtype == DType::kFp16 ? float_to_fp16(value) : float_to_bf16(value);
}

uint16_t canonicalize_negative_zero(uint16_t bits) {
  return bits == 0x8000u ? static_cast<uint16_t>(0) : bits;
}

FusedOutputs reference_fused(const FusedInputs& in) {
  FusedOutputs out;
  const int64_t count = in.num_tokens * in.hidden;
  out.allreduce.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    float sum = 0.0f;  // 0 + x == x exactly, so starting from +0 does not perturb the order
    for (const uint16_t* rank_input : in.rank_inputs) {
      sum += to_float(canonicalize_negative_zero(rank_input[i]), in.dtype);
    }
    out.allreduce[i] = canonicalize_negative_zero(from_float(sum, in.dtype));
  }
  if (in.residual_in == nullptr && in.gamma == nullptr) return out;  // pattern allreduce

  // What the residual is added to: the sum, or for a sandwich call its rounded post-norm h.
  const std::vector<uint16_t>* added = &out.allreduce;
  if (in.post_gamma != nullptr) {
    out.post_norm.resize(count);
    out.post_norm_exact.resize(count);
    if (in.norm_rounding != 0) out.post_norm_alt.resize(count);
    for (int64_t row = 0; row < in.num_tokens; ++row) {
      const int64_t base = row * in.hidden;
      reference_norm_row(in, in.post_gamma, &out.allreduce[base], &out.post_norm[base],
                         &out.post_norm_exact[base],
                         out.post_norm_alt.empty() ? nullptr : &out.post_norm_alt[base]);
    }
    added = &out.post_norm;
  }
  out.residual_out.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    if (in.residual_in == nullptr) {  // no residual (the first layer): residual_out = the sum (or h)
      out.residual_out[i] = (*added)[i];
      continue;
    }
    const float sum = to_float((*added)[i], in.dtype) + to_float(in.residual_in[i], in.dtype);
    out.residual_out[i] = from_float(sum, in.dtype);
  }
  if (in.gamma == nullptr) return out;

  out.norm_out.resize(count);
  out.norm_exact.resize(count);
  if (in.norm_rounding != 0) out.norm_alt.resize(count);
  for (int64_t row = 0; row < in.num_tokens; ++row) {
    const int64_t base = row * in.hidden;
    reference_norm_row(in, in.gamma, &out.residual_out[base], &out.norm_out[base], &out.norm_exact[base],
                       out.norm_alt.empty() ? nullptr : &out.norm_alt[base]);
  }
  return out;
}

namespace {
// One ulp of the dtype at |x| (normal spacing, clamped to the smallest normal's).
double dtype_ulp(double x, DType dtype) {
  const int mantissa_bits = dtype == DType::kFp16 ? 10 : 7;
  const int min_normal_exp = dtype == DType::kFp16 ? -14 : -126;
  int exp2 = 0;
  std::frexp(x, &exp2);
  const int e = x == 0.0 ? min_normal_exp : std::max(exp2 - 1, min_normal_exp);
  return std::ldexp(1.0, e - mantissa_bits);
}
}  // namespace

bool nccl_sum_within_tolerance(const FusedInputs& in, int64_t i, uint16_t got_bits) {
  double exact = 0.0;
  double magnitude = 0.0;
  for (const uint16_t* x : in.rank_inputs) {
    const double v = to_float(x[i], in.dtype);
    exact += v;
    magnitude += std::fabs(v);
  }
  const double got = to_float(got_bits, in.dtype);
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  double bound = static_cast<double>(in.rank_inputs.size() + 1) * dtype_ulp(magnitude, in.dtype);
  if (in.residual_in != nullptr) {
    exact += to_float(in.residual_in[i], in.dtype);
    bound += dtype_ulp(std::fabs(exact), in.dtype);
  }
  if (std::isinf(exact) || std::isinf(got)) return got == exact;
  return std::fabs(got - exact) <= bound;
}

std::vector<double> norm_exact_of(const FusedInputs& in, const uint16_t* residual_out,
                                  std::vector<double>* alt) {
  const int64_t count = in.num_tokens * in.hidden;
  std::vector<double> exact(static_cast<size_t>(count));
  if (alt != nullptr) alt->assign(static_cast<size_t>(count), 0.0);
  std::vector<uint16_t> rounded(static_cast<size_t>(in.hidden));
  for (int64_t row = 0; row < in.num_tokens; ++row) {
    const int64_t base = row * in.hidden;
    reference_norm_row(in, in.gamma, residual_out + base, rounded.data(), exact.data() + base,
                       alt != nullptr ? alt->data() + base : nullptr);
  }
  return exact;
}

namespace {
// The norm tolerance at a finite exact value: one ulp of the dtype at |exact|,
// 2^(floor(log2|exact|) - mantissa bits) but never below the subnormal spacing, + 1e-6.
double norm_tolerance(double exact, DType dtype) {
  const int mantissa_bits = dtype == DType::kFp16 ? 10 : 7;
  const int min_exp = dtype == DType::kFp16 ? -24 : -133;
  int exp2 = 0;
  std::frexp(exact, &exp2);  // |exact| in [2^(exp2-1), 2^exp2)
  const int ulp_exp = exact == 0.0 ? min_exp : std::max(exp2 - 1 - mantissa_bits, min_exp);
  return std::ldexp(1.0, ulp_exp) + 1e-6;
}
}  // namespace

bool norm_within_tolerance(uint16_t got_bits, double exact, DType dtype) {
  const double got = to_float(got_bits, dtype);
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got);
  if (std::isinf(exact) || std::isinf(got)) return got == exact;
  return std::fabs(got - exact) <= norm_tolerance(exact, dtype);
}

namespace {
// The neighbours of a 16-bit float in value order (sign-magnitude; +0 and -0 are one value).
// Preconditions: not NaN; not +Inf (next_up16) or -Inf (next_down16).
uint16_t next_up16(uint16_t b) {
  if ((b & 0x7FFFu) == 0) return 0x0001;  // -0 or +0 -> the smallest positive subnormal
  return static_cast<uint16_t>((b & 0x8000u) ? b - 1 : b + 1);
}
uint16_t next_down16(uint16_t b) {
  if ((b & 0x7FFFu) == 0) return 0x8001;
  return static_cast<uint16_t>((b & 0x8000u) ? b + 1 : b - 1);
}
// The smallest dtype value >= d, and the largest <= d (d finite).
uint16_t dtype_ceil(double d, DType dtype) {
  const uint16_t b = from_float(double_to_float_round_odd(d), dtype);
  return static_cast<double>(to_float(b, dtype)) < d ? next_up16(b) : b;
}
uint16_t dtype_floor(double d, DType dtype) {
  const uint16_t b = from_float(double_to_float_round_odd(d), dtype);
  return static_cast<double>(to_float(b, dtype)) > d ? next_down16(b) : b;
}

// Value order of the non-NaN 16-bit values of either dtype (both are sign-magnitude) as an
// integer: -Inf lowest, -0 just below +0, +Inf highest.
uint32_t order_key(uint16_t b) { return (b & 0x8000u) ? 0x7FFFu - (b & 0x7FFFu) : 0x8000u + b; }
uint16_t from_order_key(uint32_t k) {
  return k >= 0x8000u ? static_cast<uint16_t>(k - 0x8000u) : static_cast<uint16_t>(0x8000u | (0x7FFFu - k));
}
uint16_t dtype_infinity(bool negative, DType dtype) {
  const uint16_t inf = dtype == DType::kFp16 ? 0x7C00u : 0x7F80u;
  return static_cast<uint16_t>(negative ? (0x8000u | inf) : inf);
}
bool is_nan_bits(uint16_t b, DType dtype) { return std::isnan(to_float(b, dtype)); }

// The h the norm rule accepts for one exact post-norm value, as norm_within_tolerance decides it
// for norm_out: any NaN for a NaN, the infinity itself for an infinity, else the dtype values within
// the tolerance of it, which are consecutive in value order (both zeros or neither): the order keys
// lo..hi (none when lo > hi, as beyond the largest finite value).
struct AcceptedH {
  bool nan;
  uint32_t lo, hi;
};
AcceptedH accepted_h(double exact, DType dtype) {
  if (std::isnan(exact)) return {true, 1, 0};
  if (std::isinf(exact)) {
    const uint32_t k = order_key(dtype_infinity(exact < 0, dtype));
    return {false, k, k};
  }
  const double tol = norm_tolerance(exact, dtype);
  const uint32_t lowest = order_key(dtype_infinity(true, dtype));
  const uint32_t highest = order_key(dtype_infinity(false, dtype));
  // The ends up to the double rounding of exact -+ tol; norm_within_tolerance itself then settles
  // them (a step at most), so the run is exactly the values the norm rule accepts.
  uint32_t lo = order_key(dtype_ceil(exact - tol, dtype));
  uint32_t hi = order_key(dtype_floor(exact + tol, dtype));
  const auto ok = [&](uint32_t k) { return norm_within_tolerance(from_order_key(k), exact, dtype); };
  while (lo > lowest && ok(lo - 1)) --lo;
  while (lo <= hi && !ok(lo)) ++lo;
  while (hi < highest && ok(hi + 1)) ++hi;
  while (hi >= lo && !ok(hi)) --hi;  // keys of finite values are > 0: no wrap
  return {false, lo, hi};
}

// residual_out of a sandwich call for a given h: round(float(h) + float(residual_in[i])), or h
// itself without residual_in.
uint16_t sandwich_residual_of(uint16_t h, const FusedInputs& in, int64_t i) {
  if (in.residual_in == nullptr) return h;
  return from_float(to_float(h, in.dtype) + to_float(in.residual_in[i], in.dtype), in.dtype);
}

// Whether some h of `run` gives residual_out `got` (bitwise; a NaN matches any NaN). residual_out
// is non-decreasing in h's order key (one fp32 add and one rounding, both monotonic; -0 + -0 = -0
// and +0 + -0 = +0 keep the zeros in order too), so the smallest h whose residual_out is not below
// got decides it. A binary search, not a walk: near zero the 1e-6 part of the tolerance spans tens
// of thousands of bf16 values. Where h's spacing is coarser than residual_out's (a residual_in
// that nearly cancels h), the residual_outs of neighbouring h are several values apart and the
// values between them are rejected.
bool reachable_from(const AcceptedH& run, uint16_t got, const FusedInputs& in, int64_t i) {
  const DType dtype = in.dtype;
  if (run.nan) return is_nan_bits(got, dtype);  // a NaN h gives a NaN whatever residual_in is
  if (run.lo > run.hi) return false;
  // A NaN from a non-NaN h: residual_in is NaN (every h gives NaN), or h is an infinity (a run of
  // one) and residual_in the opposite infinity. Finite h and a non-NaN residual_in never give NaN.
  if (is_nan_bits(sandwich_residual_of(from_order_key(run.lo), in, i), dtype)) return is_nan_bits(got, dtype);
  if (is_nan_bits(got, dtype)) return false;
  const uint32_t want = order_key(got);
  uint32_t a = run.lo, b = run.hi + 1;  // the smallest key with residual_out >= got is in [a, b]
  while (a < b) {
    const uint32_t m = a + (b - a) / 2;
    if (order_key(sandwich_residual_of(from_order_key(m), in, i)) >= want) {
      b = m;
    } else {
      a = m + 1;
    }
  }
  return a <= run.hi && sandwich_residual_of(from_order_key(a), in, i) == got;
}

std::string describe_run(const AcceptedH& run, DType dtype) {
  if (run.nan) return "NaN";
  if (run.lo > run.hi) return "none";
  char buf[96];
  std::snprintf(buf, sizeof(buf), "[%.9g, %.9g]", to_float(from_order_key(run.lo), dtype),
                to_float(from_order_key(run.hi), dtype));
  return buf;
}
}  // namespace

std::string first_sandwich_residual_mismatch(const FusedInputs& in, const FusedOutputs& ref,
                                             const uint16_t* got) {
  const int64_t count = in.num_tokens * in.hidden;
  if (static_cast<int64_t>(ref.post_norm_exact.size()) != count) {
    return "first_sandwich_residual_mismatch: the reference has no post-norm (post_gamma not set)";
  }
  // The accepted h are those first_norm_mismatch accepts as a norm_out: within tolerance of the
  // exact value or, rounding before the weight, of its alternative.
  const bool has_alt = ref.post_norm_alt.size() == ref.post_norm_exact.size();
  int64_t first = -1, mismatches = 0;
  for (int64_t i = 0; i < count; ++i) {
    const size_t e = static_cast<size_t>(i);
    if (reachable_from(accepted_h(ref.post_norm_exact[e], in.dtype), got[i], in, i)) continue;
    if (has_alt && reachable_from(accepted_h(ref.post_norm_alt[e], in.dtype), got[i], in, i)) continue;
    if (first < 0) first = i;
    ++mismatches;
  }
  if (first < 0) return "";
  const size_t e = static_cast<size_t>(first);
  const std::string h_run = describe_run(accepted_h(ref.post_norm_exact[e], in.dtype), in.dtype);
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "residual_out (sandwich): %" PRId64 " of %" PRId64 " outside the contract; first at row %" PRId64
                " col %" PRId64 ": got 0x%04x (%.9g), from no accepted h: h in %s (exact post-norm %.9g)",
                mismatches, count, first / in.hidden, first % in.hidden, got[first],
                to_float(got[first], in.dtype), h_run.c_str(), ref.post_norm_exact[e]);
  std::string msg = buf;
  if (has_alt) {
    const std::string alt_run = describe_run(accepted_h(ref.post_norm_alt[e], in.dtype), in.dtype);
    std::snprintf(buf, sizeof(buf), " or %s (alternative %.9g)", alt_run.c_str(), ref.post_norm_alt[e]);
    msg += buf;
  }
  if (in.residual_in != nullptr) {
    std::snprintf(buf, sizeof(buf), ", residual_in %.9g", to_float(in.residual_in[first], in.dtype));
    msg += buf;
  }
  std::snprintf(buf, sizeof(buf), "; the nearest h gives 0x%04x (%.9g)", ref.residual_out[e],
                to_float(ref.residual_out[e], in.dtype));
  return msg + buf;
}

std::string first_bitwise_mismatch(const uint16_t* got, const uint16_t* want, int64_t count,
                                   int64_t row_elems, const char* what) {
  int64_t first = -1;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (got[i] != want[i]) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (first < 0) return "";
  char head[160];
  std::snprintf(head, sizeof(head), "%s: %" PRId64 " of %" PRId64 " differ; first at row %" PRId64
                " col %" PRId64 ": got ", what, mismatches, count, first / row_elems,
                first % row_elems);
  return head + describe_bits(got[first]) + " want " + describe_bits(want[first]);
}

std::string first_norm_mismatch(const uint16_t* got, const std::vector<double>& exact,
                                int64_t row_elems, DType dtype, const std::vector<double>* alt) {
  const int64_t count = static_cast<int64_t>(exact.size());
  const bool has_alt = alt != nullptr && alt->size() == exact.size();
  int64_t first = -1;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!norm_within_tolerance(got[i], exact[i], dtype) &&
        !(has_alt && norm_within_tolerance(got[i], (*alt)[i], dtype))) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (first < 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "norm_out: %" PRId64 " of %" PRId64 " outside tolerance; first at row %" PRId64
                " col %" PRId64 ": got 0x%04x (%.9g) want %.9g (rounded 0x%04x)",
                mismatches, count, first / row_elems, first % row_elems, got[first],
                to_float(got[first], dtype), exact[first],
                from_float(double_to_float_round_odd(exact[first]), dtype));
  return buf;
}

void fill_random(uint16_t* data, int64_t count, DType dtype, uint64_t seed, float scale) {
  uint64_t state = seed;
  splitmix64(&state);  // decorrelate nearby seeds before the first value
  // Forcing the 8th element of an all-special aligned group of 8 to a normal value keeps every row
  // of a legal hidden (a multiple of 8, rows start at multiples of 8) away from all-zero.
  int specials_in_group = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (i % 8 == 0) specials_in_group = 0;
    const uint64_t r = splitmix64(&state);
    const bool last_of_group = i % 8 == 7;
    if ((r >> 58) == 0 && !(last_of_group && specials_in_group == 7)) {  // 1 in 64
      ++specials_in_group;
      switch ((r >> 56) & 3u) {
        case 0: data[i] = 0x0000; break;                                     // +0.0
        case 1: data[i] = 0x8000; break;                                     // -0.0: the sentinel
        case 2: data[i] = 0x8001; break;                                     // smallest negative
        default: data[i] = static_cast<uint16_t>(0x8000u | (1u + r % 0x7Fu));  // subnormal (both)
      }
      continue;
    }
    // Irwin-Hall with four 14-bit uniforms: mean 2, variance 1/3, so (s - 2) * sqrt(3) is roughly
    // N(0, 1) with tails cut at +-3.46. Integer-derived, hence identical on every host (no libm).
    double s = 0.0;
    for (int k = 0; k < 4; ++k) {
      s += (static_cast<double>((r >> (14 * k)) & 0x3FFFu) + 0.5) / 16384.0;
    }
    const double v = (s - 2.0) * 1.7320508075688772 * static_cast<double>(scale);
    uint16_t bits = from_float(static_cast<float>(v), dtype);
    // A draw that rounds to zero (tiny or zero scale) becomes the smallest subnormal of its sign,
    // so only the special draws above are ever zero.
    if ((bits & 0x7FFFu) == 0) bits = static_cast<uint16_t>((v < 0 ? 0x8000u : 0u) | 1u);
    data[i] = bits;
  }
}

}  // namespace arf::ref
