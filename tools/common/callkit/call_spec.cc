// The call spec's derived sizes and label, and the one builder of a call's arguments
// (call_spec.h).
#include "callkit/call_spec.h"

#include <sstream>

namespace arf::callkit {

bool CallSpec::reads_scale_in() const {
  return !flat && (pattern == arfPatternResidualRmsNormFp8PerTensor ||
                   pattern == arfPatternResidualRmsNormNvfp4);
}

float CallSpec::scale_in_value() const {
  return pattern == arfPatternResidualRmsNormNvfp4 ? kGlobalScale : static_scale;
}

int64_t CallSpec::quant_bytes() const {
  if (!quantized()) return 0;
  const bool fp4 =
      pattern == arfPatternResidualRmsNormNvfp4 || pattern == arfPatternResidualRmsNormMxfp4;
  return fp4 ? elems() / 2 : elems();
}

int64_t CallSpec::scale_bytes() const {
  if (!quantized()) return 0;
  return static_cast<int64_t>(arfScaleBufferBytes(pattern, scale_layout, scale_format,
                                                  static_cast<size_t>(num_tokens),
                                                  static_cast<size_t>(hidden)));
}

std::string CallSpec::label() const {
  std::ostringstream os;
  os << (flat ? "flat_allreduce" : arfPatternName(pattern)) << " " << arfAlgorithmName(algorithm);
  if (quantized()) os << " level " << static_cast<int>(fallback);
  os << " tokens " << num_tokens << " hidden " << hidden;
  if (gamma_fp32) os << " gamma_fp32";
  if (gamma_plus_one) os << " gamma+1";
  if (alias != kNoAlias) os << " alias 0x" << std::hex << alias << std::dec;
  if (no_residual) os << " no_residual";
  if (norm_rounding != arfNormRoundOnce) os << " round_before_weight";
  if (has_norm() && post_norm) os << " sandwich";
  if (quantized()) {
    os << " layout " << static_cast<int>(scale_layout) << " format "
       << static_cast<int>(scale_format) << (norm_side_output ? " +norm_out" : "");
    if (scale_rule == arfFp8ScaleTimesReciprocal) os << " scale_rule times_reciprocal";
    if (pattern == arfPatternResidualRmsNormFp8PerTensor && static_scale != kStaticScale) {
      os << " scale " << static_scale;
    }
  }
  return os.str();
}

arfFusedArgs_t fused_args(const CallSpec& spec, arfDataType_t dtype, const CallTensors& t) {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = spec.pattern;
  a.algorithm = spec.algorithm;
  a.dtype = dtype;
  a.num_tokens = static_cast<size_t>(spec.num_tokens);
  a.hidden = static_cast<size_t>(spec.hidden);
  a.input = t.input;
  if (!spec.has_norm()) {
    a.allreduce_out = (spec.alias & kAllReduceInPlace) ? t.input : t.allreduce_out;
    return a;
  }
  a.residual_in = spec.no_residual ? nullptr : t.residual_in;
  a.residual_out = (spec.alias & kResidualInPlace) ? t.residual_in : t.residual_out;
  a.norm_out = (spec.alias & kNormIntoInput) ? t.input : t.norm_out;
  a.gamma = t.gamma;
  a.gamma_dtype = spec.gamma_fp32 ? arfFloat32 : dtype;
  a.gamma_plus_one = spec.gamma_plus_one ? 1 : 0;
  a.eps = spec.eps;
  a.norm_rounding = spec.norm_rounding;
  a.post_gamma = spec.post_norm ? t.post_gamma : nullptr;
  if (!spec.quantized()) return a;
  if (!spec.norm_side_output) a.norm_out = nullptr;
  a.quant_out = t.quant_out;
  a.scale_out = spec.scale_bytes() > 0 ? t.scale_out : nullptr;
  // Only the patterns that read scale_in get it; the others get NULL, as an engine would pass.
  a.scale_in = spec.reads_scale_in() ? t.scale_in : nullptr;
  a.scale_layout = spec.scale_layout;
  a.scale_format = spec.scale_format;
  a.scale_rule = spec.scale_rule;
  a.fallback = spec.fallback;
  return a;
}

arfStatus_t launch_call(arfComm_t comm, const CallSpec& spec, arfDataType_t dtype,
                        const CallTensors& t, cudaStream_t stream) {
  const arfFusedArgs_t a = fused_args(spec, dtype, t);
  if (spec.flat) {
    return arfAllReduce(comm, a.input, a.allreduce_out, static_cast<size_t>(spec.elems()), dtype,
                        stream);
  }
  return arfFusedAllReduce(comm, &a, stream);
}

}  // namespace arf::callkit
