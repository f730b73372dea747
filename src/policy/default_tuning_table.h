// The built-in defaults of the planner: src/policy/default_tuning_table.json, a tuning table
// (tuning_table.h) embedded in the library when it is built (cmake/default_tuning_table.cmake), so
// nothing is read at run time. Parsed and validated once, on first use; an invalid table is a
// build defect every plan then reports (the CPU tests parse it).
#pragma once

#include "base/status.h"
#include "policy/tuning_table.h"

namespace arf {

// The JSON text, as the build embedded it.
extern const char kDefaultTuningTableJson[];

const Result<TuningTable>& default_tuning_table();

}  // namespace arf
