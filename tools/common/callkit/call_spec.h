// The call kit's vocabulary: one collective call as every rank issues it (shape, pattern, dtype
// options, algorithm, aliasing, quantization options), and the one builder of the library's
// arguments from it. Shared by the GPU and ipc test suites, arfusion-bench and arfusion-stress, so
// that what a call means (which tensors it passes, which alias, which are NULL) is written once.
//
// Written against the public header only (no CUDA call, no internal header): the builder is pure,
// safe from any thread, and checked on the CPU with fake pointers (tests/cpu/test_callkit.cc).
// arfusion-stress keeps its own call spec on purpose: it is the soak written as an outside program
// would be (tools/stress/call_spec.h).
#pragma once

#include <cstdint>
#include <string>

#include "arfusion/arfusion.h"

namespace arf::callkit {

// Values the scale_in of per-tensor FP8 and NVFP4 calls hold. Norms of random data are a few units
// at most: 1/64 keeps most FP8 values inside e4m3's range and saturates a few (both paths tested);
// 448 * 6 / 8 is the usual NVFP4 global scale for a tensor amax of 8.
inline constexpr float kStaticScale = 1.0f / 64.0f;
inline constexpr float kGlobalScale = 448.0f * 6.0f / 8.0f;

// Legal in-place forms (arfusion.h), a bit set in CallSpec::alias.
enum Alias : unsigned {
  kNoAlias = 0,
  kResidualInPlace = 1u << 0,   // residual_out == residual_in
  kNormIntoInput = 1u << 1,     // norm_out == input
  kAllReduceInPlace = 1u << 2,  // allreduce_out == input (pattern allreduce and flat calls)
};

struct CallSpec {
  arfPattern_t pattern = arfPatternResidualRmsNorm;
  arfAlgorithm_t algorithm = arfAlgoAuto;
  int64_t num_tokens = 1;
  int64_t hidden = 4096;
  bool flat = false;  // arfAllReduce of num_tokens * hidden elements (pattern allreduce)
  unsigned alias = kNoAlias;

  // Norm patterns.
  bool no_residual = false;  // residual_in NULL (the first layer): residual_out = the all-reduce
  bool gamma_fp32 = false;
  bool gamma_plus_one = false;
  float eps = 1e-6f;
  arfNormRounding_t norm_rounding = arfNormRoundOnce;
  // Sandwich call (arfFusedArgs_t::post_gamma): the all-reduce is normalised with post_gamma
  // (gamma's dtype, offset and eps) before the residual add.
  bool post_norm = false;

  // Quantized patterns.
  arfFallbackLevel_t fallback = arfFallbackAuto;
  arfScaleLayout_t scale_layout = arfScaleRowMajor;
  arfScaleFormat_t scale_format = arfScaleFp32;
  arfFp8ScaleRule_t scale_rule = arfFp8ScaleDivide;  // FP8 per-token / per-group
  bool norm_side_output = true;       // pass norm_out (the dtype side output), else NULL
  float static_scale = kStaticScale;  // scale_in of FP8 per-tensor calls

  int64_t elems() const { return num_tokens * hidden; }
  bool has_norm() const { return !flat && pattern != arfPatternAllReduce; }
  bool quantized() const { return !flat && pattern >= arfPatternResidualRmsNormFp8PerTensor; }
  bool reads_scale_in() const;  // FP8 per-tensor (the static scale) and NVFP4 (the global scale)
  float scale_in_value() const;  // what scale_in holds: kGlobalScale for NVFP4, else static_scale
  int64_t quant_bytes() const;  // quant_out extent: 1 byte per element, half a byte for FP4; 0 if
                                // not quantized
  int64_t scale_bytes() const;  // arfScaleBufferBytes; 0 when the call writes no scales
  int64_t gamma_bytes() const { return hidden * (gamma_fp32 ? 4 : 2); }  // gamma, and post_gamma
  // "residual_rmsnorm twoshot tokens 64 hidden 4096 gamma_fp32": the fields that differ from the
  // defaults, for failure messages.
  std::string label() const;
};

// One rank's tensors of a call, every one the call could use; the builder picks the ones the spec
// passes and applies its aliasing. Each pointer is a device pointer or NULL.
struct CallTensors {
  void* input = nullptr;
  void* residual_in = nullptr;
  void* gamma = nullptr;
  void* post_gamma = nullptr;
  void* allreduce_out = nullptr;
  void* residual_out = nullptr;
  void* norm_out = nullptr;
  void* quant_out = nullptr;
  void* scale_out = nullptr;
  const float* scale_in = nullptr;
};

// arfFusedArgs_t of `spec` on `t` (arfFusedArgsInit's defaults for everything the spec leaves):
//  - allreduce / flat: input, allreduce_out (= input with kAllReduceInPlace);
//  - norm patterns: residual_in (NULL with no_residual), residual_out (= the residual_in tensor
//    with kResidualInPlace, read or not), norm_out (= input with kNormIntoInput; NULL for a
//    quantized call without norm_side_output), gamma and its dtype, gamma_plus_one, eps, rounding,
//    post_gamma for a sandwich call (post_norm);
//  - quantized patterns: quant_out, scale_out when the call writes scales, scale_in when it reads
//    one, the scale layout and format and the fallback level.
arfFusedArgs_t fused_args(const CallSpec& spec, arfDataType_t dtype, const CallTensors& t);

// arfFusedAllReduce, or arfAllReduce of elems() elements for flat specs (input -> allreduce_out
// as fused_args passes them). Stream and graph-capture semantics are the library's.
arfStatus_t launch_call(arfComm_t comm, const CallSpec& spec, arfDataType_t dtype,
                        const CallTensors& t, cudaStream_t stream);

}  // namespace arf::callkit
