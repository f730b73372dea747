// --op quant with -c 1: the correctness gate run before timing each (pattern, size).
//
// Every rank gets fresh data (input per rank, residual replicated, seeded by the call index), then
// each variant (fallback level, with or without the bf16 side output) runs once on that same data
// with its outputs poisoned (0xFF: NaN in bf16, e4m3, fp32 and UE8M0; scale padding included, which
// the kernels must write as zero). The anchor is the side-output variant:
//  - its quant_out and scale_out equal ref::quantize_reference of its OWN norm_out exactly
//    (max_steps 0, scales byte for byte): the kernel quantizes the same rounded values;
//  - every other variant equals the anchor bitwise on residual_out, quant_out and scale_out (a call
//    without the side output cannot be checked exactly against the double reference, whose norm is
//    only within one ulp; against its twin it can);
//  - every rank equals rank 0 bitwise (anchor; the others follow through their own anchor).
// residual_out and norm_out themselves are --op fused's gate, not repeated here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"

namespace arf::bench {

struct QuantCheckResult {
  std::vector<int64_t> wrong;       // [call]: mismatching elements/bytes summed over ranks
  std::vector<std::string> detail;  // [call]: first mismatch, "" when none
  std::string error;                // why the calls could not be checked ("" when they ran)
};

// calls: the variants of one shape that the planner accepts, in column order. The first one with
// norm_side_output is the anchor (none: calls[0], and no reference comparison; the detail says so).
// Leaves input set 0 holding the check's data.
QuantCheckResult check_quant(BenchContext& ctx, const std::vector<CallSpec>& calls, uint64_t call);

}  // namespace arf::bench
