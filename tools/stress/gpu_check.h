// The comparison logic of `--verify gpu` (gpu_verifier.h), as host+device functions: the kernel in
// gpu_check_kernels.cu calls them per element, and test_gpu_check.cc calls the same functions on
// the CPU and compares the verdicts with the host verifier's (verify.h) and the values with the
// CPU reference (src/reference/cpu_reference.h) on random data.
//
// Independent of the library: nothing here includes or calls library kernel code. The reference
// follows the numerics contract (docs/architecture.md, Numerics) the way cpu_reference.cc does,
// with every floating-point operation spelled out as a correctly rounded IEEE operation (device
// intrinsics __fadd_rn, __dmul_rn, ...; volatile on the host), so neither FMA contraction nor FTZ
// can make the device reference differ from the CPU reference:
//   allreduce    = canon(round(fp32 sum over ranks 0..N-1 of canon(input))), canon: -0.0 -> +0.0
//   residual_out = round(float(allreduce) + float(residual_in))             (bitwise)
//   norm_out     = double RMSNorm of residual_out, summed sequentially over the row as the CPU
//                  reference does (so norm_exact is bitwise the CPU's); accepted when equal to
//                  round(norm_exact) or within 1 ulp of the dtype + 1e-6 (ref::norm_within_tolerance)
// Checks per (rank, element), in the host verifier's order (kinds below): against the reference,
// then bitwise against rank 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GV_HD __host__ __device__ __forceinline__
#else
#define GV_HD inline
#endif

namespace arf::stress::gv {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxCallsPerStep = 64;  // --window's upper bound

// Kinds of a mismatch, in the order the host verifier reports the first one within a rank.
enum Kind : int {
  kOutAVsReference = 0,  // allreduce_out or residual_out
  kOutBVsReference = 1,  // norm_out
  kOutAVsRank0 = 2,
  kOutBVsRank0 = 3,
};
GV_HD bool kind_is_cross_rank(int kind) { return kind >= kOutAVsRank0; }
GV_HD bool kind_is_out_b(int kind) { return (kind & 1) != 0; }

// ---- the first-bad key: one 64-bit word, lower = earlier in the host verifier's order ------------
// call in step (6 bits) | rank (3) | kind (2) | element index in the call (40: row * hidden + col).
inline constexpr uint64_t kNoKey = ~0ull;
inline constexpr int kElemBits = 40;
GV_HD uint64_t pack_key(int call_in_step, int rank, int kind, int64_t elem) {
  return (static_cast<uint64_t>(call_in_step) << (kElemBits + 5)) |
         (static_cast<uint64_t>(rank) << (kElemBits + 2)) |
         (static_cast<uint64_t>(kind) << kElemBits) |
         (static_cast<uint64_t>(elem) & ((1ull << kElemBits) - 1));
}
struct KeyFields {
  int call_in_step = 0;
  int rank = 0;
  int kind = 0;
  int64_t elem = 0;
};
GV_HD KeyFields unpack_key(uint64_t key) {
  KeyFields f;
  f.call_in_step = static_cast<int>((key >> (kElemBits + 5)) & 63u);
  f.rank = static_cast<int>((key >> (kElemBits + 2)) & 7u);
  f.kind = static_cast<int>((key >> kElemBits) & 3u);
  f.elem = static_cast<int64_t>(key & ((1ull << kElemBits) - 1));
  return f;
}

// ---- bits and correctly rounded arithmetic -----------------------------------------------------
GV_HD uint32_t fbits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
GV_HD float bitsf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}
GV_HD uint64_t dbits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof(u));
  return u;
#endif
}
GV_HD double bitsd(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof(d));
  return d;
#endif
}

GV_HD float fadd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  volatile float r = a + b;
  return r;
#endif
}
GV_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  volatile double r = a + b;
  return r;
#endif
}
GV_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  volatile double r = a * b;
  return r;
#endif
}
GV_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(a, b);
#else
  volatile double r = a / b;
  return r;
#endif
}
GV_HD double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);  // IEEE correctly rounded
#endif
}
GV_HD bool d_isnan(double d) { return (dbits(d) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }
GV_HD bool d_isinf(double d) { return (dbits(d) & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull; }
GV_HD double d_abs(double d) { return bitsd(dbits(d) & 0x7FFFFFFFFFFFFFFFull); }

// ---- 16-bit float conversions (round to nearest even, NaN stays NaN, no flush) ----------------
GV_HD float bf16_to_float(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) u |= 0x00400000u;
  return bitsf(u);
}
GV_HD uint16_t float_to_bf16(float value) {
  const uint32_t u = fbits(value);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
GV_HD float fp16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0x1F) return bitsf(sign | 0x7F800000u | (mant != 0 ? (0x00400000u | (mant << 13)) : 0u));
  if (exp == 0) {
    if (mant == 0) return bitsf(sign);
    // mant * 2^-24: normalise into a float (exact).
    int shift = 0;
    uint32_t m = mant;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      ++shift;
    }
    return bitsf(sign | (static_cast<uint32_t>(113 - shift) << 23) | ((m & 0x3FFu) << 13));
  }
  return bitsf(sign | ((exp + 112u) << 23) | (mant << 13));
}
GV_HD uint16_t float_to_fp16(float value) {
  const uint32_t u = fbits(value);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  if (a >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (a >= 0x38800000u) {
    const uint32_t rebiased = a - (112u << 23);
    return static_cast<uint16_t>(sign | ((rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13));
  }
  const uint32_t exp = a >> 23;
  if (exp == 0) return sign;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exp;
  if (shift > 24) return sign;
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}
GV_HD float to_float(uint16_t bits, bool fp16) { return fp16 ? fp16_to_float(bits) : bf16_to_float(bits); }
GV_HD uint16_t from_float(float v, bool fp16) { return fp16 ? float_to_fp16(v) : float_to_bf16(v); }
GV_HD uint16_t canon(uint16_t bits) { return bits == 0x8000u ? static_cast<uint16_t>(0) : bits; }

// double -> float rounded to odd (no double rounding when rounded on to 16 bits).
GV_HD float double_to_float_round_odd(double d) {
  if (d_isnan(d) || d_isinf(d)) return static_cast<float>(d);
  float f = static_cast<float>(d);  // round to nearest even on host and device
  if (static_cast<double>(f) == d) return f;
  if (d_abs(static_cast<double>(f)) > d_abs(d)) f = bitsf(fbits(f) - 1u);  // one step towards 0
  return bitsf(fbits(f) | 1u);
}

// ---- the reference and the verdicts ------------------------------------------------------------
// norm_out tolerance, as ref::norm_within_tolerance: |got - exact| <= ulp(|exact|) + 1e-6.
GV_HD bool norm_within_tolerance(uint16_t got_bits, double exact, bool fp16) {
  const double got = static_cast<double>(to_float(got_bits, fp16));
  if (d_isnan(exact) || d_isnan(got)) return d_isnan(exact) && d_isnan(got);
  if (d_isinf(exact) || d_isinf(got)) return got == exact;
  const int mantissa_bits = fp16 ? 10 : 7;
  const int min_exp = fp16 ? -24 : -133;
  const int biased = static_cast<int>((dbits(exact) >> 52) & 0x7FFu);
  // frexp's exponent of a normal double is biased - 1022; zero and double subnormals are far below
  // min_exp either way.
  int ulp_exp = min_exp;
  if (biased != 0) {
    const int e = biased - 1022 - 1 - mantissa_bits;
    ulp_exp = e > min_exp ? e : min_exp;
  }
  const double ulp = bitsd(static_cast<uint64_t>(ulp_exp + 1023) << 52);
  return d_abs(dadd(got, -exact)) <= dadd(ulp, 1e-6);
}

// The accepted norm_out: bitwise round(exact), else within the tolerance (verify.cc's order).
GV_HD bool norm_ok(uint16_t got_bits, double exact, bool fp16) {
  if (got_bits == from_float(double_to_float_round_odd(exact), fp16)) return true;
  return norm_within_tolerance(got_bits, exact, fp16);
}

// One call's data for the check, as pointers to the call's FIRST row (element index i of the call
// is row i / hidden, column i % hidden).
struct CallView {
  int world = 0;
  bool fp16 = false;
  bool norm = false;  // residual_rmsnorm (else allreduce)
  int64_t hidden = 0;
  float eps = 0;
  float gamma_offset = 0;   // 1 for (1 + gamma)
  bool gamma_fp32 = false;
  const uint16_t* input[kMaxRanks] = {};  // each rank's input of this call (the data set's rows)
  const uint16_t* residual = nullptr;     // residual_in
  const void* gamma = nullptr;            // [hidden], bf16/fp16 or fp32
  const uint16_t* out_a[kMaxRanks] = {};  // allreduce_out or residual_out, per rank
  const uint16_t* out_b[kMaxRanks] = {};  // norm_out, per rank
};

// Sink: anything with `void note(int rank, int kind, int64_t elem)`.

// Element i, first phase: the all-reduce (and residual_out) reference, the checks of out_a of
// every rank; returns the reference of out_a (residual_out feeds the norm phase).
template <class Sink>
GV_HD uint16_t check_sum_element(const CallView& v, int64_t i, Sink& sink) {
  float sum = 0.0f;
  for (int r = 0; r < v.world; ++r) sum = fadd(sum, to_float(canon(v.input[r][i]), v.fp16));
  uint16_t want = canon(from_float(sum, v.fp16));
  if (v.norm) {
    want = from_float(fadd(to_float(want, v.fp16), to_float(v.residual[i], v.fp16)), v.fp16);
  }
  const uint16_t rank0 = v.out_a[0][i];
  for (int r = 0; r < v.world; ++r) {
    const uint16_t got = v.out_a[r][i];
    if (got != want) sink.note(r, kOutAVsReference, i);
    if (r > 0 && got != rank0) sink.note(r, kOutAVsRank0, i);
  }
  return want;
}

// 1 / sqrt(mean(x^2) + eps) of a row of residual_out reference bits, summed in column order.
GV_HD double inv_rms_of_row(const uint16_t* row, int64_t hidden, float eps, bool fp16) {
  double sum_sq = 0.0;
  for (int64_t c = 0; c < hidden; ++c) {
    const double x = static_cast<double>(to_float(row[c], fp16));
    sum_sq = dadd(sum_sq, dmul(x, x));
  }
  const double mean_sq = ddiv(sum_sq, static_cast<double>(hidden));
  return ddiv(1.0, dsqrt(dadd(mean_sq, static_cast<double>(eps))));
}

GV_HD double norm_exact(const CallView& v, int64_t col, uint16_t residual_bits, double inv_rms) {
  const float g = v.gamma_fp32 ? static_cast<const float*>(v.gamma)[col]
                               : to_float(static_cast<const uint16_t*>(v.gamma)[col], v.fp16);
  const double gg = dadd(static_cast<double>(g), static_cast<double>(v.gamma_offset));
  return dmul(dmul(static_cast<double>(to_float(residual_bits, v.fp16)), inv_rms), gg);
}

// Element i, second phase (residual_rmsnorm): norm_out of every rank.
template <class Sink>
GV_HD void check_norm_element(const CallView& v, int64_t i, uint16_t residual_bits, double inv_rms,
                              Sink& sink) {
  const double exact = norm_exact(v, i % v.hidden, residual_bits, inv_rms);
  const uint16_t rank0 = v.out_b[0][i];
  for (int r = 0; r < v.world; ++r) {
    const uint16_t got = v.out_b[r][i];
    if (!norm_ok(got, exact, v.fp16)) sink.note(r, kOutBVsReference, i);
    if (r > 0 && got != rank0) sink.note(r, kOutBVsRank0, i);
  }
}

// Counts and the lowest key, as the kernel's atomics leave them (host emulation and tests).
struct CountingSink {
  int call_in_step = 0;
  uint64_t wrong = 0;
  uint64_t cross = 0;
  uint64_t key = kNoKey;
  void note(int rank, int kind, int64_t elem) {
    (kind_is_cross_rank(kind) ? cross : wrong) += 1;
    const uint64_t k = pack_key(call_in_step, rank, kind, elem);
    if (k < key) key = k;
  }
};

// Host emulation of one call's kernel (gpu_check_kernels.cu does the same per block = row).
template <class Sink>
void check_call_on_host(const CallView& v, int64_t tokens, Sink& sink, uint16_t* row_scratch) {
  for (int64_t row = 0; row < tokens; ++row) {
    const int64_t base = row * v.hidden;
    for (int64_t c = 0; c < v.hidden; ++c) row_scratch[c] = check_sum_element(v, base + c, sink);
    if (!v.norm) continue;
    const double inv_rms = inv_rms_of_row(row_scratch, v.hidden, v.eps, v.fp16);
    for (int64_t c = 0; c < v.hidden; ++c) {
      check_norm_element(v, base + c, row_scratch[c], inv_rms, sink);
    }
  }
}

// ---- device state of the run (gpu_verifier.h) --------------------------------------------------
// Totals so far and the first bad element; the check stream copies the part up to `step_key` to
// pinned host memory after every step.
struct CheckState {
  unsigned long long wrong = 0;       // elements outside the contract, all ranks
  unsigned long long cross = 0;       // elements differing from rank 0
  unsigned long long bad_calls = 0;
  unsigned long long steps = 0;       // steps checked
  unsigned long long first_valid = 0;
  unsigned long long first_step = 0;  // the step of the first bad call
  unsigned long long first_key = kNoKey;
  unsigned long long first_got = 0;   // bits of the bad element
  unsigned long long first_rank0 = 0; // rank 0's bits at the same place and output
  // Scratch of the step being checked (reset by the finalize kernel).
  unsigned long long step_key = kNoKey;
  unsigned long long call_wrong[kMaxCallsPerStep] = {};
  unsigned long long call_cross[kMaxCallsPerStep] = {};
};
inline constexpr size_t kCheckStateMirrorBytes = offsetof(CheckState, step_key);

}  // namespace arf::stress::gv
