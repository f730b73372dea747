// Edge-value inputs of the GPU suite: NaN and +-Inf, and the NaN-aware
// comparison they need. Header-only and free of CUDA, so tests/cpu/test_edge_values.cc checks on
// the CPU the generator, the semantics the reference gives its data and the comparison itself.
//
// Semantics asserted (what NCCL's sum does: IEEE fp32/fp16 adds, no value checks):
//  - all-reduce: a column with a NaN on any rank sums to NaN; +Inf + finite = +Inf; +Inf + +Inf =
//    +Inf; +Inf + -Inf = NaN; finite values whose sum overflows the dtype round to +Inf;
//  - residual_out = round(sum + residual_in) with the same IEEE rules;
//  - norm_out = the IEEE result of the contract's formula: a row with a NaN has a NaN sum of
//    squares, so the whole row is NaN; a row with an Inf but no NaN has an Inf sum of squares,
//    rsqrt(Inf) = 0, so its finite elements become +-0 and its Inf elements NaN (Inf * 0).
// Expected values come from the CPU reference (ref::reference_fused), which follows those rules.
// NaN payloads and signs are unspecified (x86 propagates payloads, the GPU returns its canonical
// NaN), so against the reference a NaN matches any NaN; +-Inf and every other value must match bit
// for bit. Across ranks and fused vs unfused the comparison stays raw bitwise, NaN payloads
// included: every rank (and both paths) executes the same operations in the same order on the
// same bits.
#pragma once

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "reference/cpu_reference.h"

namespace arf::test {

inline bool is_nan_bits(uint16_t bits, DType dtype) {
  if (dtype == DType::kFp16) return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu) != 0;
  return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu) != 0;
}

inline bool is_inf_bits(uint16_t bits, DType dtype) {
  return (bits & 0x7FFFu) == (dtype == DType::kFp16 ? 0x7C00u : 0x7F80u);
}

inline uint16_t inf_bits(DType dtype, bool negative) {
  const uint16_t inf = dtype == DType::kFp16 ? 0x7C00u : 0x7F80u;
  return static_cast<uint16_t>(negative ? (inf | 0x8000u) : inf);
}

inline uint16_t max_finite_bits(DType dtype) { return dtype == DType::kFp16 ? 0x7BFFu : 0x7F7Fu; }

// Four NaN encodings: quiet, negative quiet, signalling with payload 1, all mantissa bits set.
inline uint16_t nan_bits(DType dtype, int64_t variant) {
  static constexpr uint16_t kBf16[4] = {0x7FC0, 0xFFC0, 0x7F81, 0x7FFF};
  static constexpr uint16_t kFp16[4] = {0x7E00, 0xFE00, 0x7C01, 0x7FFF};
  return (dtype == DType::kFp16 ? kFp16 : kBf16)[variant % 4];
}

// Outputs of NaN/Inf calls are poisoned with this byte instead of 0xFF: 0xFBFB is finite in both
// dtypes (bf16 -2.6e36, fp16 -65376) and far from any value the data can produce, so an element the
// kernel never wrote fails even where the reference is NaN (a NaN poison would match there).
inline constexpr int kFinitePoisonByte = 0xFB;

// What the rows of a NaN/Inf call hold, by row % 4 (row 0 always has NaN):
enum class NanInfRow {
  kNan = 0,     // NaN inputs (rank varies by column) and residuals; one +Inf column too
  kInf = 1,     // +Inf on rank 0, -Inf on the last rank, +Inf on every rank, the largest finite
                // value on every rank (the sum overflows to +Inf), +-Inf residuals; no NaN anywhere
  kCancel = 2,  // +Inf on rank 0 and -Inf on the last rank (NaN sum), +Inf sum + -Inf residual,
                // NaN residual with a finite sum
  kClean = 3,   // the random data only: norm_out checked with the usual tolerance
};

inline NanInfRow nan_inf_row_kind(int64_t row) { return static_cast<NanInfRow>(row % 4); }

// Overwrites elements of one rank's input ([tokens x hidden], filled with random data before).
inline void sprinkle_nan_inf_input(uint16_t* v, int64_t tokens, int64_t hidden, int rank,
                                   int world, DType dtype) {
  const bool last = rank == world - 1;
  for (int64_t t = 0; t < tokens; ++t) {
    uint16_t* row = v + t * hidden;
    for (int64_t c = 0; c < hidden; ++c) {
      switch (nan_inf_row_kind(t)) {
        case NanInfRow::kNan:
          if (c % 61 == 5 && (c / 61) % world == rank) row[c] = nan_bits(dtype, c / 61 + t);
          if (c % 61 == 30 && rank == 0) row[c] = inf_bits(dtype, false);
          break;
        case NanInfRow::kInf:
          if (c % 53 == 7 && rank == 0) row[c] = inf_bits(dtype, false);
          if (c % 53 == 19 && last) row[c] = inf_bits(dtype, true);
          if (c % 53 == 31) row[c] = inf_bits(dtype, false);
          if (c % 53 == 47) row[c] = max_finite_bits(dtype);
          break;
        case NanInfRow::kCancel:
          if (c % 47 == 3 && rank == 0) row[c] = inf_bits(dtype, false);
          if (c % 47 == 3 && last && world > 1) row[c] = inf_bits(dtype, true);
          if (c % 47 == 20 && rank == 0) row[c] = inf_bits(dtype, false);
          break;
        case NanInfRow::kClean: break;
      }
    }
  }
}

// Overwrites elements of residual_in (replicated on every rank, as in TP).
inline void sprinkle_nan_inf_residual(uint16_t* v, int64_t tokens, int64_t hidden, DType dtype) {
  for (int64_t t = 0; t < tokens; ++t) {
    uint16_t* row = v + t * hidden;
    for (int64_t c = 0; c < hidden; ++c) {
      switch (nan_inf_row_kind(t)) {
        case NanInfRow::kNan:
          if (c % 61 == 17) row[c] = nan_bits(dtype, c / 61 + t + 1);
          break;
        case NanInfRow::kInf:
          if (c % 53 == 43) row[c] = inf_bits(dtype, false);
          if (c % 53 == 45) row[c] = inf_bits(dtype, true);
          break;
        case NanInfRow::kCancel:
          if (c % 47 == 20) row[c] = inf_bits(dtype, true);
          if (c % 47 == 33) row[c] = nan_bits(dtype, c / 47 + t);
          break;
        case NanInfRow::kClean: break;
      }
    }
  }
}

// Where `want` is NaN, `got` must be NaN (any sign and payload); everywhere else bit for bit, so
// +Inf, -Inf, +0 and -0 are all exact. A finite poison is therefore caught everywhere and a NaN
// poison (0xFFFF) everywhere the reference is not NaN.
inline bool nan_aware_equal(uint16_t got, uint16_t want, DType dtype) {
  return is_nan_bits(want, dtype) ? is_nan_bits(got, dtype) : got == want;
}

// first_bitwise_mismatch (cpu_reference.h) with nan_aware_equal: "" when all match.
inline std::string first_nan_aware_mismatch(const uint16_t* got, const uint16_t* want,
                                            int64_t count, int64_t row_elems, DType dtype,
                                            const char* what) {
  int64_t first = -1, mismatches = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (nan_aware_equal(got[i], want[i], dtype)) continue;
    if (first < 0) first = i;
    ++mismatches;
  }
  if (first < 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "%s (NaN matches any NaN): %" PRId64 " of %" PRId64 " differ; first at row %" PRId64
                " col %" PRId64 ": got 0x%04x (%.9g) want 0x%04x (%.9g)",
                what, mismatches, count, first / row_elems, first % row_elems, got[first],
                ref::to_float(got[first], dtype), want[first], ref::to_float(want[first], dtype));
  return buf;
}

inline int64_t count_nan(const std::vector<uint16_t>& v, DType dtype) {
  int64_t n = 0;
  for (uint16_t bits : v) n += is_nan_bits(bits, dtype) ? 1 : 0;
  return n;
}

inline int64_t count_inf(const std::vector<uint16_t>& v, DType dtype) {
  int64_t n = 0;
  for (uint16_t bits : v) n += is_inf_bits(bits, dtype) ? 1 : 0;
  return n;
}

// Whether any output of a reference holds NaN (norm: its unrounded value). The checks demand this
// to be false for every content but NaN/Inf: ref::norm_within_tolerance lets a NaN output match a
// NaN reference, which must never excuse a poisoned (NaN) output of an ordinary call.
inline bool reference_has_nan(const ref::FusedOutputs& want, DType dtype) {
  if (count_nan(want.allreduce, dtype) > 0 || count_nan(want.residual_out, dtype) > 0) return true;
  for (double x : want.norm_exact) {
    if (x != x) return true;
  }
  return false;
}

}  // namespace arf::test
