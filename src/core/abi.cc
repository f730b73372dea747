// arfAbiQuery / arfAbiNames: the layout of every public struct and the value of every public enum
// constant, as this library was compiled, so language bindings (python/arfusion) check their
// mirrors against the library they loaded instead of trusting a hand-written copy. The table is
// checked against the header by tests/cpu/test_abi.cc (every field and constant must be in it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "arfusion/arfusion.h"
#include "core/abi.h"

namespace {

struct AbiEntry {
  const char* name;
  int64_t value;
};

#define ARF_ABI_SIZE(S) {#S, static_cast<int64_t>(sizeof(S))}
#define ARF_ABI_FIELD(S, F) {#S "." #F, static_cast<int64_t>(offsetof(S, F))}
#define ARF_ABI_CONST(C) {#C, static_cast<int64_t>(C)}

constexpr AbiEntry kAbi[] = {
    ARF_ABI_CONST(ARF_API_VERSION),
    ARF_ABI_CONST(ARF_VERSION_MAJOR),
    ARF_ABI_CONST(ARF_VERSION_MINOR),
    ARF_ABI_CONST(ARF_MAX_RANKS),
    ARF_ABI_CONST(ARF_UNIQUE_ID_STRING_BYTES),
    // arfStatus_t
    ARF_ABI_CONST(arfSuccess), ARF_ABI_CONST(arfInvalidArgument), ARF_ABI_CONST(arfUnsupported),
    ARF_ABI_CONST(arfCudaError), ARF_ABI_CONST(arfNcclError), ARF_ABI_CONST(arfTimeout),
    ARF_ABI_CONST(arfInternal), ARF_ABI_CONST(arfCommFailed),
    // arfDataType_t, arfTransport_t
    ARF_ABI_CONST(arfBFloat16), ARF_ABI_CONST(arfFloat16), ARF_ABI_CONST(arfFloat32),
    ARF_ABI_CONST(arfTransportLocal), ARF_ABI_CONST(arfTransportIpc),
    // arfPattern_t
    ARF_ABI_CONST(arfPatternAllReduce), ARF_ABI_CONST(arfPatternResidualRmsNorm),
    ARF_ABI_CONST(arfPatternResidualRmsNormFp8PerTensor),
    ARF_ABI_CONST(arfPatternResidualRmsNormFp8PerToken),
    ARF_ABI_CONST(arfPatternResidualRmsNormFp8PerGroup),
    ARF_ABI_CONST(arfPatternResidualRmsNormNvfp4), ARF_ABI_CONST(arfPatternResidualRmsNormMxfp4),
    // arfScaleLayout_t, arfScaleFormat_t, arfFallbackLevel_t, arfNormRounding_t,
    // arfFp8ScaleRule_t
    ARF_ABI_CONST(arfScaleRowMajor), ARF_ABI_CONST(arfScaleMnMajor),
    ARF_ABI_CONST(arfScaleSwizzled128x4), ARF_ABI_CONST(arfScaleFp32),
    ARF_ABI_CONST(arfScaleUe8m0AsFp32), ARF_ABI_CONST(arfScaleUe8m0Packed),
    ARF_ABI_CONST(arfFallbackAuto), ARF_ABI_CONST(arfFallbackOneKernel),
    ARF_ABI_CONST(arfFallbackTwoKernels), ARF_ABI_CONST(arfFallbackThreeKernels),
    ARF_ABI_CONST(arfNormRoundOnce), ARF_ABI_CONST(arfNormRoundBeforeWeight),
    ARF_ABI_CONST(arfFp8ScaleDivide), ARF_ABI_CONST(arfFp8ScaleTimesReciprocal),
    // arfElementType_t
    ARF_ABI_CONST(arfElementFloat32), ARF_ABI_CONST(arfElementFloat8E4M3),
    ARF_ABI_CONST(arfElementUInt8),
    // arfAlgorithm_t
    ARF_ABI_CONST(arfAlgoAuto), ARF_ABI_CONST(arfAlgoOneshotLamport),
    ARF_ABI_CONST(arfAlgoOneshotPull), ARF_ABI_CONST(arfAlgoTwoshot), ARF_ABI_CONST(arfAlgoUnfused),
    ARF_ABI_CONST(arfAlgoNccl),
    // arfUniqueId
    ARF_ABI_SIZE(arfUniqueId), ARF_ABI_FIELD(arfUniqueId, internal),
    // arfCommConfig_t
    ARF_ABI_SIZE(arfCommConfig_t), ARF_ABI_FIELD(arfCommConfig_t, struct_size),
    ARF_ABI_FIELD(arfCommConfig_t, version), ARF_ABI_FIELD(arfCommConfig_t, transport),
    ARF_ABI_FIELD(arfCommConfig_t, rank), ARF_ABI_FIELD(arfCommConfig_t, world_size),
    ARF_ABI_FIELD(arfCommConfig_t, device), ARF_ABI_FIELD(arfCommConfig_t, id),
    ARF_ABI_FIELD(arfCommConfig_t, max_tokens), ARF_ABI_FIELD(arfCommConfig_t, max_hidden),
    ARF_ABI_FIELD(arfCommConfig_t, dtype), ARF_ABI_FIELD(arfCommConfig_t, oneshot_max_tokens),
    ARF_ABI_FIELD(arfCommConfig_t, timeout_seconds),
    ARF_ABI_FIELD(arfCommConfig_t, init_timeout_seconds),
    ARF_ABI_FIELD(arfCommConfig_t, programmatic_launch),
    ARF_ABI_FIELD(arfCommConfig_t, verify_calls), ARF_ABI_FIELD(arfCommConfig_t, max_ctas),
    // arfFusedArgs_t
    ARF_ABI_SIZE(arfFusedArgs_t), ARF_ABI_FIELD(arfFusedArgs_t, struct_size),
    ARF_ABI_FIELD(arfFusedArgs_t, version), ARF_ABI_FIELD(arfFusedArgs_t, pattern),
    ARF_ABI_FIELD(arfFusedArgs_t, algorithm), ARF_ABI_FIELD(arfFusedArgs_t, dtype),
    ARF_ABI_FIELD(arfFusedArgs_t, num_tokens), ARF_ABI_FIELD(arfFusedArgs_t, hidden),
    ARF_ABI_FIELD(arfFusedArgs_t, input), ARF_ABI_FIELD(arfFusedArgs_t, allreduce_out),
    ARF_ABI_FIELD(arfFusedArgs_t, residual_in), ARF_ABI_FIELD(arfFusedArgs_t, residual_out),
    ARF_ABI_FIELD(arfFusedArgs_t, norm_out), ARF_ABI_FIELD(arfFusedArgs_t, gamma),
    ARF_ABI_FIELD(arfFusedArgs_t, gamma_dtype), ARF_ABI_FIELD(arfFusedArgs_t, gamma_plus_one),
    ARF_ABI_FIELD(arfFusedArgs_t, eps), ARF_ABI_FIELD(arfFusedArgs_t, quant_out),
    ARF_ABI_FIELD(arfFusedArgs_t, scale_out), ARF_ABI_FIELD(arfFusedArgs_t, scale_in),
    ARF_ABI_FIELD(arfFusedArgs_t, scale_layout), ARF_ABI_FIELD(arfFusedArgs_t, scale_format),
    ARF_ABI_FIELD(arfFusedArgs_t, fallback), ARF_ABI_FIELD(arfFusedArgs_t, norm_rounding),
    ARF_ABI_FIELD(arfFusedArgs_t, scale_rule), ARF_ABI_FIELD(arfFusedArgs_t, post_gamma),
    // arfPlan_t
    ARF_ABI_SIZE(arfPlan_t), ARF_ABI_FIELD(arfPlan_t, algorithm),
    ARF_ABI_FIELD(arfPlan_t, inner_allreduce), ARF_ABI_FIELD(arfPlan_t, num_kernels),
    ARF_ABI_FIELD(arfPlan_t, grid), ARF_ABI_FIELD(arfPlan_t, block), ARF_ABI_FIELD(arfPlan_t, forced),
    ARF_ABI_FIELD(arfPlan_t, reason), ARF_ABI_FIELD(arfPlan_t, fallback_level),
    // arfPlanFacts_t
    ARF_ABI_SIZE(arfPlanFacts_t), ARF_ABI_FIELD(arfPlanFacts_t, struct_size),
    ARF_ABI_FIELD(arfPlanFacts_t, version), ARF_ABI_FIELD(arfPlanFacts_t, world_size),
    ARF_ABI_FIELD(arfPlanFacts_t, dtype), ARF_ABI_FIELD(arfPlanFacts_t, max_tokens),
    ARF_ABI_FIELD(arfPlanFacts_t, max_hidden), ARF_ABI_FIELD(arfPlanFacts_t, oneshot_max_tokens),
    ARF_ABI_FIELD(arfPlanFacts_t, sm_count), ARF_ABI_FIELD(arfPlanFacts_t, ranks_per_device),
    ARF_ABI_FIELD(arfPlanFacts_t, nccl), ARF_ABI_FIELD(arfPlanFacts_t, max_ctas),
    // arfQuantBuffer_t, arfQuantOutputs_t
    ARF_ABI_SIZE(arfQuantBuffer_t), ARF_ABI_FIELD(arfQuantBuffer_t, element),
    ARF_ABI_FIELD(arfQuantBuffer_t, rank), ARF_ABI_FIELD(arfQuantBuffer_t, element_bytes),
    ARF_ABI_FIELD(arfQuantBuffer_t, dims), ARF_ABI_FIELD(arfQuantBuffer_t, bytes),
    ARF_ABI_FIELD(arfQuantBuffer_t, tokens_align), ARF_ABI_FIELD(arfQuantBuffer_t, tokens_scale),
    ARF_ABI_FIELD(arfQuantBuffer_t, fixed),
    ARF_ABI_SIZE(arfQuantOutputs_t), ARF_ABI_FIELD(arfQuantOutputs_t, quant_out),
    ARF_ABI_FIELD(arfQuantOutputs_t, scale_out),
};

#undef ARF_ABI_SIZE
#undef ARF_ABI_FIELD
#undef ARF_ABI_CONST

}  // namespace

namespace arf {

bool abi_lookup(const char* name, int64_t* value) {
  for (const AbiEntry& e : kAbi) {
    if (std::strcmp(e.name, name) == 0) {
      *value = e.value;
      return true;
    }
  }
  return false;
}

const char* abi_names() {
  static const std::string* names = [] {
    auto* s = new std::string();  // never destroyed: callers may hold the pointer until exit
    for (const AbiEntry& e : kAbi) *s += std::string(e.name) + "\n";
    return s;
  }();
  return names->c_str();
}

}  // namespace arf
