// Figures derived from a row, computed once so the tables and the JSON say the same thing.
#pragma once

#include <cmath>
#include <string>

#include "results.h"

namespace arf::bench {

struct RowSummary {
  int64_t wrong = -1;             // sum over checked cells; -1 when no cell was checked
  bool failed = false;            // a cell has an error (a refused algorithm, n/a, is not one)
  const Cell* unfused = nullptr;  // the `unfused` column, if measured
  const Cell* auto_cell = nullptr;
  const Cell* best_fused = nullptr;  // fastest arfusion column other than unfused (auto included)
  double speedup = NAN;              // unfused.us / best_fused.us
};

// nccl_label names the baseline column (not an arfusion algorithm); "" when there is none.
RowSummary summarize(const Row& row, const std::string& nccl_label);

bool has_time(const Cell& cell);

// --op quant: 3_kernels / 1_kernel time, and the 1_kernel call's achieved bandwidth as a percent of
// the D2D copy bandwidth (world 1); NaN when a cell has no time.
double quant_speedup(const Row& row);
double quant_pct_copy(const Row& row, double copy_gbps);

}  // namespace arf::bench
