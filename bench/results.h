// What one benchmark run measured: a header (run facts) and rows of cells, one cell per measured
// column. The runner fills these; report.cc turns them into tables and JSON.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "devices.h"

namespace arf::bench {

struct Cell {
  std::string column;        // algorithm name, or the NCCL label
  double us = NAN;           // max over ranks of (elapsed / calls), median over repeats; NaN when not measured
  std::vector<double> repeats_us;  // each repeat's max over ranks (--repeats > 1: the spread)
  int64_t wrong = -1;        // elements wrong in the check; -1 = not checked
  std::string chosen;        // the algorithm arfPlan chose (auto) or that ran
  std::string inner;         // arfPlan's inner all-reduce (= chosen unless chosen is unfused)
  std::string reason;        // the plan's reason string
  std::string error;         // why there is no time, or why the check could not run
  std::string note;          // first mismatch the check found ("" when none)
  bool unsupported = false;  // the planner refused this (algorithm, shape): n/a, not an error
  bool skipped = false;      // not run: a communicator had failed earlier in the sweep
};

// --op quant's columns, in cell order: the fallback chain (3 kernels, 2, 1), each level forced, and
// level 1 again with the bf16 norm_out side output (keep_bf16). Levels 1-3 pass norm_out = NULL.
struct QuantColumn {
  const char* name;
  arfFallbackLevel_t level;
  bool norm_side_output;
};
inline constexpr QuantColumn kQuantColumns[] = {
    {"3_kernels", arfFallbackThreeKernels, false},
    {"2_kernels", arfFallbackTwoKernels, false},
    {"1_kernel", arfFallbackOneKernel, false},
    {"1_kernel+bf16", arfFallbackOneKernel, true},
};
inline constexpr int kQuant3k = 0;  // the cells the 3k/1k speedup and %copy use
inline constexpr int kQuant1k = 2;

struct Row {
  std::string variant;      // --op quant: quant_variant_label, e.g. "fp8_group/mn/ue8m0"
  int64_t bytes_moved = 0;  // --op quant: bytes the 1_kernel call moves at world 1
  int64_t tokens = 0;
  int64_t row_elems = 0;  // hidden (allreduce: the row width used to shape the flat count)
  int64_t count = 0;      // elements per rank
  int64_t bytes = 0;      // bytes of the input per rank
  std::vector<Cell> cells;
};

struct RunHeader {
  std::string version;
  std::string date;
  std::string git_commit;  // $ARF_GIT_COMMIT, or ""
  RankLayout layout;
  int num_input_sets = 1;
  double copy_gbps = NAN;  // epilogue: D2D copy bandwidth, read+write bytes counted
  int64_t copy_bytes = 0;  // size of that copy
  std::string nccl_label;  // "" when NCCL is not timed
  std::string nccl_note;   // why NCCL is skipped, or its version
  bool processes = false;  // one process per rank (arfusion-run, transport ipc); else rank threads
};

// Bandwidths in GB/s (1e9 bytes per second) for `bytes` moved in `us` microseconds.
inline double gbps(double bytes, double us) { return bytes / us / 1e3; }
// nccl-tests' bus bandwidth of an all-reduce: algbw * 2(n-1)/n.
inline double busbw_factor(int world) { return world > 1 ? 2.0 * (world - 1) / world : 1.0; }
// Bytes an epilogue call moves: read input, residual and gamma; write residual_out and norm_out.
inline int64_t epilogue_bytes(int64_t tokens, int64_t hidden, int64_t elem_bytes) {
  return (4 * tokens * hidden + hidden) * elem_bytes;
}

}  // namespace arf::bench
