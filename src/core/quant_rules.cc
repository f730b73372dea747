// The quantized patterns' host rules (quant_rules.h).
#include "core/quant_rules.h"

#include "common/quant_formats.h"

namespace arf {

// KernelParams carries the public enums' values as ints (comm_call.cc); the kernels read them
// as these internal enums.
static_assert(arfScaleRowMajor == static_cast<int>(quant::ScaleLayout::kRowMajor) &&
              arfScaleMnMajor == static_cast<int>(quant::ScaleLayout::kMnMajor) &&
              arfScaleSwizzled128x4 == static_cast<int>(quant::ScaleLayout::kSwizzled128x4));
static_assert(arfScaleFp32 == kScaleFormatFp32 && arfScaleUe8m0AsFp32 == kScaleFormatUe8m0AsFp32 &&
              arfScaleUe8m0Packed == kScaleFormatUe8m0Packed);
static_assert(arfFp8ScaleDivide == static_cast<int>(quant::Fp8ScaleRule::kDivide) &&
              arfFp8ScaleTimesReciprocal == static_cast<int>(quant::Fp8ScaleRule::kTimesReciprocal));
static_assert(arfPatternResidualRmsNormFp8PerTensor == static_cast<int>(Pattern::kFp8PerTensor) &&
              arfPatternResidualRmsNormFp8PerToken == static_cast<int>(Pattern::kFp8PerToken) &&
              arfPatternResidualRmsNormFp8PerGroup == static_cast<int>(Pattern::kFp8PerGroup) &&
              arfPatternResidualRmsNormNvfp4 == static_cast<int>(Pattern::kNvfp4) &&
              arfPatternResidualRmsNormMxfp4 == static_cast<int>(Pattern::kMxfp4));

namespace {

const char* name_of(Pattern pattern) { return arfPatternName(static_cast<arfPattern_t>(pattern)); }

bool valid_layout(int layout) {
  return layout == arfScaleRowMajor || layout == arfScaleMnMajor || layout == arfScaleSwizzled128x4;
}

bool valid_format(int format) {
  return format == arfScaleFp32 || format == arfScaleUe8m0AsFp32 || format == arfScaleUe8m0Packed;
}

// Why each block size: the consumers' formats (DeepSeek 1x128 FP8 groups; NVFP4's 16-element and
// MXFP4's 32-element micro-blocks), as quant_layout.h defines them for the kernels.
const char* group_why(Pattern pattern) {
  switch (pattern) {
    case Pattern::kFp8PerGroup: return "one scale per 1x128 group";
    case Pattern::kNvfp4: return "one e4m3 scale per 16 elements";
    case Pattern::kMxfp4: return "one UE8M0 scale per 32 elements";
    default: return "";
  }
}

// The shape, layout and format of a call are ones its scales can be laid out for: the addressing
// and the buffer size below answer zero otherwise.
bool scale_call_is_legal(Pattern pattern, int layout, int format, int64_t num_tokens,
                         int64_t hidden) {
  return num_tokens >= 0 && hidden > 0 && quant_hidden_error(pattern, hidden).empty() &&
         quant_scale_error(pattern, layout, format).empty();
}

}  // namespace

int64_t quant_group_elems(Pattern pattern) {
  switch (pattern) {
    case Pattern::kFp8PerGroup: return quant::kFp8GroupElems;
    case Pattern::kNvfp4: return quant::kNvfp4BlockElems;
    case Pattern::kMxfp4: return quant::kMxfp4BlockElems;
    default: return 0;
  }
}

int64_t quant_scale_cols(Pattern pattern, int64_t hidden) {
  if (pattern == Pattern::kFp8PerToken) return 1;
  const int64_t group = quant_group_elems(pattern);
  return group > 0 ? hidden / group : 0;
}

bool quant_writes_scales(Pattern pattern) {
  return is_quant_pattern(pattern) && pattern != Pattern::kFp8PerTensor;
}

bool quant_reads_scale_in(Pattern pattern) {
  return pattern == Pattern::kFp8PerTensor || pattern == Pattern::kNvfp4;
}

bool quant_is_fp4(Pattern pattern) {
  return pattern == Pattern::kNvfp4 || pattern == Pattern::kMxfp4;
}

namespace {

// quant_out: [T, H] e4m3 or [T, H/2] packed e2m1 pairs, one byte each; rank 0 for non-quant
// patterns.
quant::BufferShape quant_out_shape(Pattern pattern, int64_t hidden) {
  if (!is_quant_pattern(pattern)) return {0, 0, {{1, 0, 0}, {1, 0, 0}}};
  return {2, 1, {{1, 1, 0}, {1, 0, quant_is_fp4(pattern) ? hidden / 2 : hidden}}};
}

void to_public(const quant::BufferShape& shape, arfElementType_t element, int64_t num_tokens,
               arfQuantBuffer_t* out) {
  *out = arfQuantBuffer_t{};
  out->element = element;
  out->rank = shape.rank;
  out->element_bytes = static_cast<size_t>(shape.elem_bytes);
  out->bytes = static_cast<size_t>(shape.bytes(num_tokens));
  for (int i = 0; i < shape.rank; ++i) {
    out->dims[i] = static_cast<size_t>(shape.dims[i].at(num_tokens));
    out->tokens_align[i] = static_cast<size_t>(shape.dims[i].tokens_align);
    out->tokens_scale[i] = static_cast<size_t>(shape.dims[i].tokens_scale);
    out->fixed[i] = static_cast<size_t>(shape.dims[i].fixed);
  }
}

}  // namespace

int64_t quant_out_bytes(Pattern pattern, int64_t num_tokens, int64_t hidden) {
  return quant_out_shape(pattern, hidden).bytes(num_tokens);
}

std::string quant_hidden_error(Pattern pattern, int64_t hidden) {
  const int64_t group = quant_group_elems(pattern);
  if (group == 0 || hidden % group == 0) return "";
  return std::string("pattern ") + name_of(pattern) + " needs hidden % " + std::to_string(group) +
         " == 0 (" + group_why(pattern) + "); hidden is " + std::to_string(hidden);
}

std::string quant_scale_error(Pattern pattern, int layout, int format) {
  if (!is_quant_pattern(pattern)) return "";
  if (!valid_layout(layout)) {
    return "scale_layout " + std::to_string(layout) + " is not a valid arfScaleLayout_t";
  }
  if (!valid_format(format)) {
    return "scale_format " + std::to_string(format) + " is not a valid arfScaleFormat_t";
  }
  const std::string pattern_text = std::string(" for pattern ") + name_of(pattern);
  if (layout == arfScaleMnMajor && pattern != Pattern::kFp8PerGroup) {
    return "scale_layout MN-major is for fp8 per-group only, not" + pattern_text;
  }
  if (layout == arfScaleSwizzled128x4 && !quant_is_fp4(pattern)) {
    return "scale_layout 128x4-swizzled is for nvfp4 and mxfp4 only, not" + pattern_text;
  }
  if (format != arfScaleFp32 && pattern != Pattern::kFp8PerGroup) {
    return "scale_format " + std::to_string(format) +
           " applies to fp8 per-group only; leave it arfScaleFp32" + pattern_text +
           (quant_is_fp4(pattern) ? " (its scales are always one-byte codes)" : "");
  }
  return "";
}

bool quant_has_dynamic_fp8_scale(Pattern pattern) {
  return pattern == Pattern::kFp8PerToken || pattern == Pattern::kFp8PerGroup;
}

std::string quant_scale_rule_error(Pattern pattern, int scale_rule) {
  if (scale_rule != arfFp8ScaleDivide && scale_rule != arfFp8ScaleTimesReciprocal) {
    return "scale_rule " + std::to_string(scale_rule) + " is not a valid arfFp8ScaleRule_t";
  }
  if (scale_rule != arfFp8ScaleDivide && !quant_has_dynamic_fp8_scale(pattern)) {
    return std::string("scale_rule arfFp8ScaleTimesReciprocal applies to fp8 per-token and "
                       "per-group only (their dynamic scales), not to pattern ") +
           name_of(pattern) + "; leave it arfFp8ScaleDivide";
  }
  return "";
}

quant::ScaleStorage quant_scale_storage(Pattern pattern, int format) {
  if (quant_is_fp4(pattern)) return quant::ScaleStorage::kByte;
  return format == arfScaleUe8m0Packed ? quant::ScaleStorage::kByte : quant::ScaleStorage::kFp32;
}

quant::ScaleAddressing quant_scale_addressing(Pattern pattern, int layout, int format,
                                              int64_t num_tokens, int64_t hidden) {
  if (quant_group_elems(pattern) == 0 ||
      !scale_call_is_legal(pattern, layout, format, num_tokens, hidden)) {
    return {0, 0, 0, 0, 0};
  }
  return quant::scale_addressing(static_cast<quant::ScaleLayout>(layout),
                                 quant_scale_storage(pattern, format), num_tokens,
                                 quant_scale_cols(pattern, hidden));
}

std::string quant_output_shapes(Pattern pattern, int layout, int format, int64_t hidden,
                                QuantOutputShapes* out) {
  if (!is_quant_pattern(pattern)) {
    return std::string("pattern ") + name_of(pattern) + " does not quantize: it has no quant_out or scale_out";
  }
  if (hidden <= 0) return "hidden must be positive, not " + std::to_string(hidden);
  std::string why = quant_hidden_error(pattern, hidden);
  if (why.empty()) why = quant_scale_error(pattern, layout, format);
  if (!why.empty()) return why;
  QuantOutputShapes s;
  s.quant_out = quant_out_shape(pattern, hidden);
  s.quant_element = quant_is_fp4(pattern) ? arfElementUInt8 : arfElementFloat8E4M3;
  if (!quant_writes_scales(pattern)) {
    s.scale_out = {1, 4, {{1, 0, 0}, {1, 0, 0}}};  // per-tensor: no scales, an empty fp32 array
    s.scale_element = arfElementFloat32;
  } else {
    const quant::ScaleStorage storage = quant_scale_storage(pattern, format);
    s.scale_out = quant::scale_buffer_shape(static_cast<quant::ScaleLayout>(layout), storage,
                                            quant_scale_cols(pattern, hidden));
    s.scale_element = pattern == Pattern::kNvfp4                    ? arfElementFloat8E4M3
                      : storage == quant::ScaleStorage::kByte ? arfElementUInt8
                                                                    : arfElementFloat32;
  }
  *out = s;
  return "";
}

void quant_output_layout(const QuantOutputShapes& shapes, int64_t num_tokens, arfQuantOutputs_t* out) {
  to_public(shapes.quant_out, shapes.quant_element, num_tokens, &out->quant_out);
  to_public(shapes.scale_out, shapes.scale_element, num_tokens, &out->scale_out);
}

int64_t quant_scale_buffer_bytes(Pattern pattern, int layout, int format, int64_t num_tokens,
                                 int64_t hidden) {
  QuantOutputShapes shapes;
  if (num_tokens < 0 || !quant_output_shapes(pattern, layout, format, hidden, &shapes).empty()) return 0;
  return shapes.scale_out.bytes(num_tokens);
}

}  // namespace arf
