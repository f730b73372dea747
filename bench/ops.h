// arfusion-bench's operations, one descriptor each, as nccl-tests describes each collective in one
// struct (testColl: name, byte counts, data, bandwidth, run). Whatever differs between --op
// allreduce, fused, epilogue and quant is a field of its descriptor, and the driver (args, devices,
// session, runner, report, JSON) reads the fields instead of asking which op runs. A new op is
// one more entry in the table (ops.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "context.h"
#include "export/tool_api.h"
#include "results.h"
#include "timing.h"

namespace arf::bench {

class NcclBaseline;
class Report;

// When the run measures the device-to-device copy bandwidth (the %copy columns' reference).
enum class CopyBandwidth { kNever, kAlways, kAtWorld1 };

struct OpDescriptor {
  Op op;
  const char* name;  // the --op value; "op" in the report and the JSON

  // ---- the sweep
  // One call shape per row, in row order.
  std::vector<CallSpec> (*shapes)(const BenchArgs& args);
  // The measured columns, in cell order (the NCCL baseline's label is appended when it runs).
  std::vector<std::string> (*columns)(const BenchArgs& args);
  // Every column's cell of one row. After a communicator failed, *stopped says why and the row's
  // remaining cells are marked skipped (the caller ends the sweep). `nccl` is null when there is
  // no NCCL column.
  Row (*measure_row)(BenchContext& ctx, const NcclBaseline* nccl, CallSpec spec,
                     const TimingConfig& cfg, uint64_t* calls, std::string* stopped);

  // ---- the report
  void (Report::*print_table_header)() const;
  void (Report::*print_row)(const Row& row) const;
  std::string (*row_label)(const Row& row);  // where a footer note points: "4096 B", "8 tokens"
  // The JSON row's fields of this op (null: none beyond the common ones).
  void (*json_row_fields)(const Row& row, const BenchArgs& args, const RunHeader& header,
                          nlohmann::json* out);
  bool bus_bandwidth_footer;  // the footer averages each column's bus bandwidth

  // ---- what the op needs
  bool residual;        // calls read and write a residual: the input sets hold one
  bool one_rank;        // one rank (world 1), in one process: no all-reduce to time
  bool quant_variants;  // rows per --quant variant: --quant/--scale-layout/--scale-format, a
                        // --hidden list, quant_out/scale buffers
  // The NCCL baseline column's pattern (ranks on distinct GPUs, one process); nullopt: none.
  std::optional<arfPattern_t> nccl_baseline;
  CopyBandwidth copy_bandwidth;
  // --tune-out: the table group this op's sweep derives an entry for; nullopt: not allowed.
  std::optional<TuningGroup> tune_group;
};

const OpDescriptor& op_descriptor(Op op);
// Every descriptor, in Op order (the --op names).
const std::vector<OpDescriptor>& op_descriptors();

// Whether a run of `op` on `world` ranks measures the copy bandwidth.
bool measures_copy_bandwidth(const OpDescriptor& op, int world);

}  // namespace arf::bench
