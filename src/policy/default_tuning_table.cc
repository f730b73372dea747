#include "policy/default_tuning_table.h"

namespace arf {

const Result<TuningTable>& default_tuning_table() {
  static const Result<TuningTable> table = [] {
    Result<TuningTable> parsed = parse_tuning_table(kDefaultTuningTableJson);
    if (parsed.is_ok()) return parsed;
    return Result<TuningTable>(internal_error("the built-in default tuning table (src/policy/"
                                              "default_tuning_table.json) is invalid: " +
                                              parsed.status().message()));
  }();
  return table;
}

}  // namespace arf
