// The algorithm and pattern name table (names.h).
#include "base/names.h"

#include <utility>

namespace arf {
namespace {

constexpr std::pair<arfAlgorithm_t, const char*> kAlgorithmNames[] = {
    {arfAlgoAuto, "auto"},
    {arfAlgoOneshotLamport, "oneshot_lamport"},
    {arfAlgoOneshotPull, "oneshot_pull"},
    {arfAlgoTwoshot, "twoshot"},
    {arfAlgoUnfused, "unfused"},
    {arfAlgoNccl, "nccl"},
};

constexpr std::pair<arfPattern_t, const char*> kPatternNames[] = {
    {arfPatternAllReduce, "allreduce"},
    {arfPatternResidualRmsNorm, "residual_rmsnorm"},
    {arfPatternResidualRmsNormFp8PerTensor, "residual_rmsnorm_fp8_per_tensor"},
    {arfPatternResidualRmsNormFp8PerToken, "residual_rmsnorm_fp8_per_token"},
    {arfPatternResidualRmsNormFp8PerGroup, "residual_rmsnorm_fp8_per_group"},
    {arfPatternResidualRmsNormNvfp4, "residual_rmsnorm_nvfp4"},
    {arfPatternResidualRmsNormMxfp4, "residual_rmsnorm_mxfp4"},
};

}  // namespace

const char* algorithm_name(arfAlgorithm_t algorithm) {
  for (const auto& [value, name] : kAlgorithmNames) {
    if (value == algorithm) return name;
  }
  return "unknown";
}

const char* pattern_name(arfPattern_t pattern) {
  for (const auto& [value, name] : kPatternNames) {
    if (value == pattern) return name;
  }
  return "unknown";
}

std::optional<arfAlgorithm_t> algorithm_from_name(std::string_view name) {
  for (const auto& [value, spelled] : kAlgorithmNames) {
    if (name == spelled) return value;
  }
  return std::nullopt;
}

}  // namespace arf
