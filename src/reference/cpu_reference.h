// CPU reference of every pattern, shared by tests, `arfusion-bench --check` and the stress tool.
// It follows the numerics contract (docs/architecture.md) exactly where the contract is exact (fp32 sum over
// ranks in order 0..N-1, dtype rounding of the sum and of residual_out) and computes RMSNorm in
// double precision, so norm_out is compared with a stated tolerance (compare_norm below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/kernel_params.h"

namespace arf::ref {

// IEEE conversions, round-to-nearest-even, NaN stays NaN (quiet), no flush of subnormals.
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float fp16_to_float(uint16_t bits);
uint16_t float_to_fp16(float value);
float to_float(uint16_t bits, DType dtype);
uint16_t from_float(float value, DType dtype);
// -0.0 -> +0.0 (what the Lamport push does to every pushed element).
uint16_t canonicalize_negative_zero(uint16_t bits);

struct FusedInputs {
  DType dtype = DType::kBf16;
  int64_t num_tokens = 0;
  int64_t hidden = 0;
  std::vector<const uint16_t*> rank_inputs;  // world pointers, each [num_tokens * hidden]
  // [num_tokens * hidden]; null with gamma set: no residual (residual_out = the all-reduce);
  // both null: pattern allreduce.
  const uint16_t* residual_in = nullptr;
  const void* gamma = nullptr;               // [hidden] of gamma_dtype (residual_rmsnorm only)
  DType gamma_dtype = DType::kBf16;
  float gamma_offset = 0.0f;
  float eps = 1e-6f;
  int norm_rounding = 0;  // arfNormRounding_t: 1 rounds y * rsqrt(...) to the dtype before gamma
  // Sandwich (post-norm) calls: [hidden] of gamma_dtype, with gamma_offset, eps and norm_rounding
  // as for gamma. The all-reduce is normalised with it and rounded (h), and h takes the
  // all-reduce's place: residual_out = round(h + residual_in) (= h without residual_in).
  const void* post_gamma = nullptr;
};

struct FusedOutputs {
  std::vector<uint16_t> allreduce;     // round(fp32 sum in rank order), -0.0 canonicalised
  std::vector<uint16_t> residual_out;  // exact contract
  std::vector<uint16_t> norm_out;      // round(double norm) — the best the dtype can hold
  std::vector<double> norm_exact;      // unrounded double norm, for tolerance checks
  // norm_rounding 1 only: the same with the intermediate round(y * s) taken on the other side of
  // the exact y * s (the kernel's fp32 rsqrt may round the intermediate either way near a tie).
  // A norm within tolerance of either value passes (first_norm_mismatch).
  std::vector<double> norm_alt;
  // Sandwich calls only (post_gamma set): h, the post-norm of the all-reduce, as norm_out is for
  // the residual (post_norm rounded from the exact value, post_norm_exact, post_norm_alt).
  // residual_out and norm_out above then follow from this rounded h; a kernel's h may be the
  // neighbouring value (within tolerance), so its residual_out is checked with
  // first_sandwich_residual_mismatch and its norm_out against norm_exact_of its own residual_out.
  std::vector<uint16_t> post_norm;
  std::vector<double> post_norm_exact;
  std::vector<double> post_norm_alt;
};

// Computes all outputs of residual_rmsnorm (allreduce always; residual/norm when residual_in set).
FusedOutputs reference_fused(const FusedInputs& in);

// norm_out tolerance: |got - exact| <= 1 ulp of the dtype at |exact| + 1e-6 absolute. Why not bitwise:
// the kernel uses fp32 rsqrt and a fixed-shape fp32 sum of squares; the reference uses double, so the
// two can round to neighbouring values. The fused and unfused kernels are bitwise equal to each other.
bool norm_within_tolerance(uint16_t got, double exact, DType dtype);

// The `nccl` algorithm sums in NCCL's order (ring or tree, rounding in the activation dtype), so
// its sum is checked against the exact one with a bound instead of bitwise: element i of the sum
// (with residual_in set: of round(sum) + residual_in, rounded) is accepted when
// |got - exact| <= (world + 1) ulp(sum over ranks of |x_r|) (+ 1 ulp of the exact result with the
// residual). Each of NCCL's world - 1 additions rounds once; the +1 covers the final rounding.
bool nccl_sum_within_tolerance(const FusedInputs& in, int64_t i, uint16_t got);

// The epilogue of the unfused contract applied to residual_out rows someone else summed: the exact
// (double) norm of each element of `residual_out` ([num_tokens * hidden], in.gamma / eps / offset
// as for reference_fused). norm_within_tolerance against it checks our epilogue kernel alone.
std::vector<double> norm_exact_of(const FusedInputs& in, const uint16_t* residual_out,
                                  std::vector<double>* alt = nullptr);

// Sandwich calls: residual_out element i is within the contract when it equals
// round(float(h) + float(residual_in[i])) (h itself without residual_in) for some dtype value h
// that the norm rule accepts for the exact post-norm, as first_norm_mismatch accepts a norm_out:
// norm_within_tolerance of ref.post_norm_exact or, with norm_rounding 1, of ref.post_norm_alt.
// Bitwise, but any NaN matches any NaN. Exactly the reachable values: where h's spacing is coarser
// than residual_out's (a residual_in that nearly cancels h), values between the residual_outs of
// two neighbouring h are rejected. "" when every element passes, else the first failure and the
// count. `ref` is reference_fused(in).
std::string first_sandwich_residual_mismatch(const FusedInputs& in, const FusedOutputs& ref,
                                             const uint16_t* got);

// First mismatch report ("" when all equal): bitwise comparison of two arrays.
std::string first_bitwise_mismatch(const uint16_t* got, const uint16_t* want, int64_t count,
                                   int64_t row_elems, const char* what);
// First norm element out of tolerance ("" when all pass).
std::string first_norm_mismatch(const uint16_t* got, const std::vector<double>& exact,
                                int64_t row_elems, DType dtype,
                                const std::vector<double>* alt = nullptr);

// Deterministic, distinct random data: values drawn from `seed` (mix rank and call index into it),
// roughly N(0, scale), never all zero; about 1/64 of elements are +-0.0 or negative subnormals to
// exercise the Lamport sentinel path.
void fill_random(uint16_t* data, int64_t count, DType dtype, uint64_t seed, float scale = 1.0f);

}  // namespace arf::ref
