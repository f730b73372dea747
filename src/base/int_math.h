// Integer helpers shared by host and device code (the planner, the tuning table, the quantized
// layouts' index arithmetic): one definition, so a grid and a buffer size round the same way.
#pragma once

#include <cstdint>

#include "base/host_device.h"

namespace arf {

// Preconditions: x >= 0, m > 0.
ARF_HD constexpr int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }
ARF_HD constexpr int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }

}  // namespace arf
