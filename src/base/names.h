// The names of the algorithms and patterns, spelled the same in code, CLI flags, logs, tests and
// tuning tables: the one table behind the C API's arfAlgorithmName / arfAlgorithmFromName /
// arfPatternName (api.cc), which the tools call, and behind the planner's reasons and the tuning
// table's JSON (policy/). Keyed by the public enums; the internal Algorithm and Pattern
// (kernel_params.h) have the same values (core asserts it).
#pragma once

#include <optional>
#include <string_view>

#include "arfusion/arfusion.h"

namespace arf {

// "unknown" for a value outside the enum.
const char* algorithm_name(arfAlgorithm_t algorithm);
const char* pattern_name(arfPattern_t pattern);
// The algorithm spelled `name` (case-sensitive, "auto" included); nullopt for any other text.
std::optional<arfAlgorithm_t> algorithm_from_name(std::string_view name);

}  // namespace arf
