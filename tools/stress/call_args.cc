// Library arguments and kernel parameters of one call (call_args.h).
#include "call_args.h"

#include "data_gen.h"
#include "quant_rules.h"

namespace arf::stress {

arfFusedArgs_t fused_args(const CallSpec& c, arfDataType_t dtype, const TensorSet& t) {
  arfFusedArgs_t a = shape_args(c, dtype);
  a.input = t.input;
  if (c.pattern == Pat::kAllReduce || c.pattern == Pat::kFlat) {
    a.allreduce_out = c.allreduce_out_is_input ? static_cast<void*>(t.input) : t.allreduce_out;
    return a;
  }
  a.residual_in = c.residual_null ? nullptr : t.residual_in;
  a.residual_out = (c.residual_in_place && !c.residual_null) ? t.residual_in : t.residual_out;
  a.norm_out = c.norm_out_is_input ? t.input : t.norm_out;
  a.gamma = t.gamma;
  a.post_gamma = c.sandwich ? t.post_gamma : nullptr;  // replaces shape_args' dummy
  if (pat_is_quant(c.pattern)) {
    a.quant_out = t.quant_out;
    a.scale_out = pat_has_scale_out(c.pattern) ? t.scale_out : nullptr;
    a.scale_in = pat_needs_scale_in(c.pattern) ? t.scale_in : nullptr;
  }
  return a;
}

FlatArgs flat_args(const CallSpec& c, const TensorSet& t) {
  FlatArgs f;
  f.in = t.input;
  f.out = c.allreduce_out_is_input ? static_cast<void*>(t.input) : t.allreduce_out;
  f.count = static_cast<size_t>(c.flat_count);
  return f;
}

bool input_in_buffer(const CallSpec& c, uint64_t seed, uint32_t rank, int percent) {
  if (percent <= 0 || c.norm_out_is_input || c.allreduce_out_is_input) return false;
  const uint64_t h = element_hash(stream_base(seed, c.index, rank, kStreamInputBuffer), 0);
  return static_cast<int>(h % 100) < percent;
}

ReferenceUnits reference_units(const CallSpec& c, const RunConstants& k, uint32_t rank, uint32_t world) {
  if (k.reference == ReferenceMode::kAll || !c.comparable_across_ranks() || world <= 1) return {1, 0};
  if (k.reference == ReferenceMode::kRotate) return c.index % world == rank ? ReferenceUnits{1, 0} : ReferenceUnits{0, 0};
  // split: unit j on rank (j + call) % world, i.e. j % world == (rank - call) mod world
  const uint32_t shift = static_cast<uint32_t>(c.index % world);
  return {world, (rank + world - shift) % world};
}

DeviceCall device_call(const CallSpec& c, const RunConstants& k, uint32_t rank, uint32_t world,
                       const TensorSet& t) {
  DeviceCall d;
  d.seed = k.seed;
  d.call = c.index;
  d.rank = rank;
  d.world = world;
  d.pattern = static_cast<uint32_t>(c.pattern);
  d.fp16 = k.dtype == arfFloat16 ? 1 : 0;
  d.skew_us = k.skew_us;
  d.tokens = c.tokens;
  d.hidden = c.hidden;
  d.count = c.elements();
  d.comparable = c.comparable_across_ranks() ? 1 : 0;
  const ReferenceUnits ref = reference_units(c, k, rank, world);
  d.ref_stride = ref.stride;
  d.ref_phase = ref.phase;
  d.input = t.input;
  if (c.pattern == Pat::kAllReduce || c.pattern == Pat::kFlat) {
    const FlatArgs f = flat_args(c, t);
    d.allreduce_out = static_cast<const uint16_t*>(f.out);
    d.input_is_output = c.allreduce_out_is_input ? 1 : 0;
    return d;
  }
  const arfFusedArgs_t a = fused_args(c, k.dtype, t);
  d.gamma_fp32 = c.gamma_fp32 ? 1 : 0;
  d.gamma_plus_one = c.gamma_plus_one ? 1 : 0;
  d.per_rank = c.per_rank_residual_gamma ? 1 : 0;
  d.residual_null = c.residual_null ? 1 : 0;
  d.before_weight = c.rounding == arfNormRoundBeforeWeight ? 1 : 0;
  d.eps = c.eps;
  d.residual_in = c.residual_null ? nullptr : t.residual_in;
  d.residual_out = static_cast<const uint16_t*>(a.residual_out);
  d.norm_out = static_cast<const uint16_t*>(a.norm_out);
  d.gamma = t.gamma;
  d.sandwich = c.sandwich ? 1 : 0;
  d.post_gamma = const_cast<void*>(a.post_gamma);
  d.input_is_output = a.norm_out == a.input ? 1 : 0;
  d.residual_is_output = (a.residual_in != nullptr && a.residual_out == a.residual_in) ? 1 : 0;
  if (pat_is_quant(c.pattern)) {
    d.quant_out = t.quant_out;
    d.scale_in = static_cast<float*>(const_cast<float*>(a.scale_in));
    d.scale_out = static_cast<uint8_t*>(a.scale_out);
    d.layout = c.layout == arfScaleMnMajor ? kLayoutMnMajor
               : c.layout == arfScaleSwizzled128x4 ? kLayoutSwizzled : kLayoutRowMajor;
    d.format = static_cast<uint32_t>(c.format);
    d.scale_bytes = d.scale_out == nullptr
                        ? 0
                        : static_cast<int64_t>(arfScaleBufferBytes(to_arf_pattern(c.pattern), c.layout,
                                                                   c.format, static_cast<size_t>(c.tokens),
                                                                   static_cast<size_t>(c.hidden)));
  }
  return d;
}

}  // namespace arf::stress
