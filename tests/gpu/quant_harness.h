// The quantized patterns' part of the GPU harness. It reuses harness.h's World, data
// generator, HangGuard and enqueue discipline, and adds what a quantized call has on top: the
// quant_out / scale_out / scale_in buffers, poisoned before each call (scale padding included),
// and the checks:
//  - residual_out bitwise and norm_out (when requested) within tolerance of the CPU reference;
//  - a call that returns its norm side output: quant_out and scale_out must equal
//    ref::quantize_reference of THAT norm exactly (max_steps 0, scales byte for byte with zero
//    padding), because the kernel quantizes the same rounded values;
//  - every rank bitwise identical to rank 0;
//  - calls of one group (same data: the same call at fallback levels 1/2/3, with and without the
//    norm side output, under other algorithms) bitwise identical to each other. This is how a call
//    without the side output is checked: against the double reference its norm is only within one
//    ulp, so its scales could not be demanded exact, but against its twin they can.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "gpu/harness.h"

namespace arf::test {

using callkit::kGlobalScale;  // scale_in of NVFP4 calls
using callkit::kStaticScale;  // scale_in of FP8 per-tensor calls (CallSpec::static_scale)

// A quantized pattern and the layout and format of its scales (the tests' tables of what to run).
struct ScaleFormat {
  arfPattern_t pattern;
  arfScaleLayout_t layout;
  arfScaleFormat_t format;
};

// The fused algorithms, each of which runs every fallback level (level 3 as the inner all-reduce
// of unfused), and the levels.
inline constexpr arfAlgorithm_t kFusedAlgorithms[] = {arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                                      arfAlgoTwoshot};
inline constexpr arfFallbackLevel_t kFallbackLevels[] = {
    arfFallbackOneKernel, arfFallbackTwoKernels, arfFallbackThreeKernels};

// A quantized call of the kit (pattern, fallback, scale layout and format, norm side output,
// static scale) and the data set it reads.
struct QuantCallSpec : callkit::CallSpec {
  QuantCallSpec() { pattern = arfPatternResidualRmsNormFp8PerToken; }
  size_t data_index = 0;  // which CallData (and identity group) the call uses

  // The level arfPlan must report: the forced one, else 3 for unfused and 1 otherwise.
  int expected_level() const;
  // The residual_rmsnorm CallSpec whose data (make_call_data) this call consumes.
  test::CallSpec data_spec() const;
  std::string label() const;  // the kit's label and the data index
};

// `base` under `algorithm` at every fallback level, with the norm side output and then without:
// six calls on base's data set, which check_quant_calls finds bitwise equal or reports.
inline std::vector<QuantCallSpec> level_variants(const QuantCallSpec& base,
                                                 arfAlgorithm_t algorithm) {
  std::vector<QuantCallSpec> calls;
  for (bool side_output : {true, false}) {
    for (arfFallbackLevel_t level : kFallbackLevels) {
      QuantCallSpec s = base;
      s.algorithm = algorithm;
      s.fallback = level;
      s.norm_side_output = side_output;
      calls.push_back(s);
    }
  }
  return calls;
}

// norm_out empty without the side output, scale_out empty for per-tensor.
using QuantRankOutputs = callkit::RankOutputs;
using QuantCallResult = std::vector<QuantRankOutputs>;  // [rank]

// Allocates and uploads every call's buffers on every rank and asks arfPlan for each call (the
// plan must report expected_level(), a matching algorithm and kernel count, and be the same on
// every rank), then enqueues all calls back-to-back (the inputs, gamma and scale_in overwritten
// right after each call), synchronizes, checks statuses and arfCommGetAsyncError, and downloads.
// data[spec.data_index] feeds each call. Results [call][rank].
std::vector<QuantCallResult> run_quant_calls(const World& world,
                                             const std::vector<QuantCallSpec>& specs,
                                             const std::vector<CallData>& data);

// The checks listed at the top of this file; failures name the call, rank and first mismatch.
void check_quant_calls(const World& world, const std::vector<QuantCallSpec>& specs,
                       const std::vector<CallData>& data,
                       const std::vector<QuantCallResult>& results);

}  // namespace arf::test
