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

// Values the scale_in of per-tensor FP8 and NVFP4 calls hold. Norms of the harness data are a few
// units at most: 1/64 keeps most FP8 values inside e4m3's range and saturates a few (both paths
// tested); 448 * 6 / 8 is the usual NVFP4 global scale for a tensor amax of 8.
inline constexpr float kStaticScale = 1.0f / 64.0f;
inline constexpr float kGlobalScale = 448.0f * 6.0f / 8.0f;

struct QuantCallSpec {
  arfPattern_t pattern = arfPatternResidualRmsNormFp8PerToken;
  arfAlgorithm_t algorithm = arfAlgoAuto;
  arfFallbackLevel_t fallback = arfFallbackAuto;
  int64_t num_tokens = 1;
  int64_t hidden = 4096;
  arfScaleLayout_t layout = arfScaleRowMajor;
  arfScaleFormat_t format = arfScaleFp32;
  bool norm_side_output = true;  // pass norm_out (else NULL)
  float static_scale = kStaticScale;  // scale_in of fp8 per-tensor calls
  size_t data_index = 0;         // which CallData (and identity group) the call uses

  int64_t elems() const { return num_tokens * hidden; }
  uint64_t quant_bytes() const;  // quant_out extent
  uint64_t scale_bytes() const;  // arfScaleBufferBytes (0 for per-tensor)
  // The level arfPlan must report: the forced one, else 3 for unfused and 1 otherwise.
  int expected_level() const;
  // The residual_rmsnorm CallSpec whose data (make_call_data) this call consumes.
  CallSpec data_spec() const;
  std::string label() const;
};

struct QuantRankOutputs {
  std::vector<uint16_t> residual_out, norm_out;  // norm_out empty without the side output
  std::vector<uint8_t> quant_out, scale_out;     // scale_out empty for per-tensor
};
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
