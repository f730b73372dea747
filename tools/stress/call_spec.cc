// Names and mappings of the soak's call vocabulary (call_spec.h).
#include "call_spec.h"

namespace arf::stress {
namespace {

constexpr const char* kPatNames[kNumPats] = {"allreduce", "flat", "residual_rmsnorm", "fp8_tensor",
                                             "fp8_token", "fp8_group", "nvfp4", "mxfp4"};
constexpr const char* kTokenKindNames[kNumTokenKinds] = {
    "tiny", "log_uniform", "boundary", "full_capacity", "tiny_after_large", "large_after_tiny",
    "replayed", "full_grid"};

}  // namespace

const char* pat_name(Pat p) { return kPatNames[static_cast<int>(p)]; }

std::optional<Pat> pat_from_name(const std::string& name) {
  for (int i = 0; i < kNumPats; ++i) {
    if (name == kPatNames[i]) return static_cast<Pat>(i);
  }
  return std::nullopt;
}

arfPattern_t to_arf_pattern(Pat p) {
  switch (p) {
    case Pat::kAllReduce:
    case Pat::kFlat: return arfPatternAllReduce;
    case Pat::kResidualRmsNorm: return arfPatternResidualRmsNorm;
    case Pat::kFp8Tensor: return arfPatternResidualRmsNormFp8PerTensor;
    case Pat::kFp8Token: return arfPatternResidualRmsNormFp8PerToken;
    case Pat::kFp8Group: return arfPatternResidualRmsNormFp8PerGroup;
    case Pat::kNvfp4: return arfPatternResidualRmsNormNvfp4;
    case Pat::kMxfp4: return arfPatternResidualRmsNormMxfp4;
  }
  return arfPatternAllReduce;
}

std::optional<Pat> pat_from_arf(arfPattern_t p, bool flat) {
  if (flat) return p == arfPatternAllReduce ? std::optional<Pat>(Pat::kFlat) : std::nullopt;
  switch (p) {
    case arfPatternAllReduce: return Pat::kAllReduce;
    case arfPatternResidualRmsNorm: return Pat::kResidualRmsNorm;
    case arfPatternResidualRmsNormFp8PerTensor: return Pat::kFp8Tensor;
    case arfPatternResidualRmsNormFp8PerToken: return Pat::kFp8Token;
    case arfPatternResidualRmsNormFp8PerGroup: return Pat::kFp8Group;
    case arfPatternResidualRmsNormNvfp4: return Pat::kNvfp4;
    case arfPatternResidualRmsNormMxfp4: return Pat::kMxfp4;
  }
  return std::nullopt;
}

bool pat_has_norm(Pat p) { return p != Pat::kAllReduce && p != Pat::kFlat; }
bool pat_is_quant(Pat p) { return pat_has_norm(p) && p != Pat::kResidualRmsNorm; }
bool pat_needs_scale_in(Pat p) { return p == Pat::kFp8Tensor || p == Pat::kNvfp4; }
bool pat_has_scale_out(Pat p) { return pat_is_quant(p) && p != Pat::kFp8Tensor; }

const char* token_kind_name(TokenKind k) { return kTokenKindNames[static_cast<int>(k)]; }

const char* reference_mode_name(ReferenceMode m) {
  switch (m) {
    case ReferenceMode::kRotate: return "rotate";
    case ReferenceMode::kSplit: return "split";
    case ReferenceMode::kAll: return "all";
  }
  return "?";
}

// The address of a static object: non-NULL and 16-byte aligned, should a planner ever look.
alignas(16) static const unsigned char kShapePostGammaDummy[16] = {};
const void* const kShapePostGamma = kShapePostGammaDummy;

arfFusedArgs_t shape_args(const CallSpec& c, arfDataType_t dtype) {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = to_arf_pattern(c.pattern);
  a.algorithm = c.pattern == Pat::kFlat ? arfAlgoAuto : c.algorithm;
  a.dtype = dtype;
  a.num_tokens = static_cast<size_t>(c.tokens);
  a.hidden = static_cast<size_t>(c.hidden);
  if (pat_has_norm(c.pattern)) {
    a.gamma_dtype = c.gamma_fp32 ? arfFloat32 : dtype;
    a.gamma_plus_one = c.gamma_plus_one ? 1 : 0;
    a.eps = c.eps;
    a.norm_rounding = c.rounding;
    if (c.sandwich) a.post_gamma = kShapePostGamma;
  }
  if (pat_is_quant(c.pattern)) {
    a.scale_layout = c.layout;
    a.scale_format = c.format;
    a.fallback = c.fallback;
  }
  return a;
}

}  // namespace arf::stress
