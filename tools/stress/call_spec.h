// One call of the soak, as every rank issues it: the vocabulary shared by the schedule
// generator, the CSV replay, the rank loop, the kernels' parameters and the report.
//
// A CallSpec is identical on every rank (the schedule is a pure function of the seed and the
// options, or the replayed file); what differs per rank (the data) is derived from the hash in
// data_gen.h.
//
// Deliberately not the call kit's spec (tools/common/callkit/), which the tests, the bench and the
// soak share: the soak is written against the public header only (its include path holds include/
// and nothing else), as an outside program would be, and the kit reaches the CPU reference through
// src/export/. Its own builder (call_args.h) also derives our kernels' view of each call from the
// same rules, which the kit's builder does not know about.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"

namespace arf::stress {

// The soak's patterns: the library's, plus `flat` (arfAllReduce, a 1-D count).
enum class Pat : uint8_t {
  kAllReduce = 0,
  kFlat,
  kResidualRmsNorm,
  kFp8Tensor,
  kFp8Token,
  kFp8Group,
  kNvfp4,
  kMxfp4,
};
inline constexpr int kNumPats = 8;

const char* pat_name(Pat p);                        // "allreduce", "flat", ..., "mxfp4"
std::optional<Pat> pat_from_name(const std::string& name);
arfPattern_t to_arf_pattern(Pat p);                 // flat -> arfPatternAllReduce
std::optional<Pat> pat_from_arf(arfPattern_t p, bool flat);
bool pat_has_norm(Pat p);                           // residual_rmsnorm and the quantized ones
bool pat_is_quant(Pat p);
bool pat_needs_scale_in(Pat p);                     // FP8 per-tensor, NVFP4
bool pat_has_scale_out(Pat p);                      // every quantized pattern but per-tensor

// How a call's token count was chosen (for the report: the mix must be visible).
enum class TokenKind : uint8_t {
  kTiny = 0,       // 1..8
  kLogUniform,     // log-uniform 1..max_tokens
  kBoundary,       // a token count on either side of an arfPlan change
  kFull,           // max_tokens at the largest hidden
  kTinyAfterLarge, // 1..4 right after a large call
  kLargeAfterTiny, // a large call right after such a tiny one
  kReplayed,       // from a CSV
  kFullGrid,       // the fewest tokens at which the plan reaches its largest grid (volume mix)
};
inline constexpr int kNumTokenKinds = 8;
const char* token_kind_name(TokenKind k);

// Who recomputes a call's expected outputs (call_args.h reference_units): one rank per call in
// turn (rotate), every rank its share of the rows (split), or every rank everything (all).
enum class ReferenceMode : uint8_t { kRotate, kSplit, kAll };
const char* reference_mode_name(ReferenceMode m);  // "rotate", "split", "all"

struct CallSpec {
  uint64_t index = 0;     // call number in the schedule (skipped calls included)
  Pat pattern = Pat::kResidualRmsNorm;
  arfAlgorithm_t algorithm = arfAlgoAuto;  // requested; flat calls always auto
  int64_t tokens = 1;
  int64_t hidden = 128;
  int64_t flat_count = 0;  // flat: elements (multiple of 8); else 0
  TokenKind token_kind = TokenKind::kLogUniform;
  bool skipped = false;    // arfPlan said it cannot run (the same on every rank)

  // Aliasing and optional tensors.
  bool residual_in_place = false;       // residual_out == residual_in
  bool residual_null = false;           // residual_in NULL (API v4): residual_out = all-reduce
  bool norm_out_is_input = false;       // norm_out == input
  bool allreduce_out_is_input = false;  // allreduce / flat: out == input

  // Data.
  bool per_rank_residual_gamma = false;  // outputs then differ across ranks
  bool gamma_fp32 = false;
  bool gamma_plus_one = false;
  float eps = 1e-6f;
  arfNormRounding_t rounding = arfNormRoundOnce;
  // Sandwich call (API v6, norm patterns only): post_gamma set, so residual_out = round(h +
  // residual_in) with h = round(RMSNorm(sum) * post_gamma) (arfusion.h, Numerics). post_gamma's
  // data follows per_rank_residual_gamma, gamma_fp32 and gamma_plus_one like gamma's.
  bool sandwich = false;

  // Quantized patterns.
  arfScaleLayout_t layout = arfScaleRowMajor;
  arfScaleFormat_t format = arfScaleFp32;
  arfFallbackLevel_t fallback = arfFallbackAuto;

  // Issue: replay's issued_back_to_back == 0 -> wait for this call's check before the next.
  bool wait_after = false;

  // The plan arfPlan gave (for the report; replay compares with the recorded grid/block).
  arfAlgorithm_t plan_algorithm = arfAlgoAuto;
  int plan_grid = 0;
  int plan_block = 0;
  int plan_kernels = 0;
  int recorded_grid = 0;   // replay only (0: not recorded)
  int recorded_block = 0;

  int64_t elements() const { return pattern == Pat::kFlat ? flat_count : tokens * hidden; }
  // Residual and gamma identical on all ranks -> outputs bitwise identical across ranks.
  bool comparable_across_ranks() const { return !per_rank_residual_gamma || !pat_has_norm(pattern); }
};

// arfFusedArgs_t of a call (shape, pattern, algorithm, options) with NULL pointers: what
// arfPlanShape / arfPlanFromFacts need. The rank loop fills the pointers (call_args.h). The one
// exception: a sandwich call's post_gamma is a non-NULL dummy (kShapePostGamma), since whether it
// is NULL is part of the shape those functions plan (arfusion.h, arfPlanShape); never dereferenced.
arfFusedArgs_t shape_args(const CallSpec& c, arfDataType_t dtype);
extern const void* const kShapePostGamma;

}  // namespace arf::stress
