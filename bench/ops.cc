// The table of arfusion-bench's operations (ops.h) and what is particular to each: its shapes,
// columns and row measurement; its report printers and JSON fields live with the report.
#include "ops.h"

#include "measure.h"
#include "quant_measure.h"
#include "report.h"

namespace arf::bench {
namespace {

// ---- shapes

std::vector<CallSpec> allreduce_shapes(const BenchArgs& args) {
  std::vector<CallSpec> shapes;
  for (int64_t count : allreduce_counts(args)) {
    CallSpec s;
    s.pattern = arfPatternAllReduce;
    s.hidden = allreduce_row_elems(count, args.hidden);
    s.num_tokens = count / s.hidden;
    shapes.push_back(s);
  }
  return shapes;
}

std::vector<CallSpec> token_shapes(const BenchArgs& args) {
  std::vector<CallSpec> shapes;
  for (int64_t tokens : args.tokens) {
    CallSpec s;
    s.pattern = arfPatternResidualRmsNorm;
    s.num_tokens = tokens;
    s.hidden = args.hidden;
    shapes.push_back(s);
  }
  return shapes;
}

// ---- columns: the -a algorithms; the epilogue op has no all-reduce to choose and times what the
// planner runs at world 1; --op quant's columns are fallback levels (the planner picks the
// algorithm within each).

std::vector<arfAlgorithm_t> requested_algorithms(const BenchArgs& args) { return args.algos; }
std::vector<arfAlgorithm_t> planned_algorithm(const BenchArgs&) { return {arfAlgoAuto}; }

std::vector<std::string> names_of(const std::vector<arfAlgorithm_t>& algorithms) {
  std::vector<std::string> names;
  for (arfAlgorithm_t algo : algorithms) names.push_back(arfAlgorithmName(algo));
  return names;
}

std::vector<std::string> requested_columns(const BenchArgs& args) {
  return names_of(requested_algorithms(args));
}
std::vector<std::string> planned_column(const BenchArgs& args) {
  return names_of(planned_algorithm(args));
}
std::vector<std::string> level_columns(const BenchArgs&) {
  std::vector<std::string> names;
  for (const QuantColumn& c : kQuantColumns) names.push_back(c.name);
  return names;
}

// ---- rows

Row measure_requested(BenchContext& ctx, const NcclBaseline* nccl, CallSpec spec,
                      const TimingConfig& cfg, uint64_t* calls, std::string* stopped) {
  return measure_algorithms_row(ctx, requested_algorithms(*ctx.args), nccl, spec, cfg, calls,
                                stopped);
}
Row measure_planned(BenchContext& ctx, const NcclBaseline* nccl, CallSpec spec,
                    const TimingConfig& cfg, uint64_t* calls, std::string* stopped) {
  return measure_algorithms_row(ctx, planned_algorithm(*ctx.args), nccl, spec, cfg, calls, stopped);
}
Row measure_levels(BenchContext& ctx, const NcclBaseline*, CallSpec spec, const TimingConfig& cfg,
                   uint64_t* calls, std::string* stopped) {
  return measure_quant_row(ctx, spec, cfg, calls, stopped);
}

std::string bytes_label(const Row& row) { return std::to_string(row.bytes) + " B"; }
std::string tokens_label(const Row& row) { return std::to_string(row.tokens) + " tokens"; }
std::string variant_label(const Row& row) {
  return row.variant + " " + std::to_string(row.tokens) + " tokens x " +
         std::to_string(row.row_elems);
}

}  // namespace

const std::vector<OpDescriptor>& op_descriptors() {
  static const std::vector<OpDescriptor> kOps = {
      {.op = Op::kAllReduce,
       .name = "allreduce",
       .shapes = allreduce_shapes,
       .columns = requested_columns,
       .measure_row = measure_requested,
       .print_table_header = &Report::print_allreduce_header,
       .print_row = &Report::print_allreduce_row,
       .row_label = bytes_label,
       .json_row_fields = nullptr,
       .bus_bandwidth_footer = true,
       .residual = false,
       .one_rank = false,
       .quant_variants = false,
       .nccl_baseline = arfPatternAllReduce,
       .copy_bandwidth = CopyBandwidth::kNever,
       .tune_group = std::nullopt},
      {.op = Op::kFused,
       .name = "fused",
       .shapes = token_shapes,
       .columns = requested_columns,
       .measure_row = measure_requested,
       .print_table_header = &Report::print_fused_header,
       .print_row = &Report::print_fused_row,
       .row_label = tokens_label,
       .json_row_fields = fused_json_fields,
       .bus_bandwidth_footer = false,
       .residual = true,
       .one_rank = false,
       .quant_variants = false,
       .nccl_baseline = arfPatternResidualRmsNorm,
       .copy_bandwidth = CopyBandwidth::kNever,
       .tune_group = TuningGroup::kPlain},
      {.op = Op::kEpilogue,
       .name = "epilogue",
       .shapes = token_shapes,
       .columns = planned_column,
       .measure_row = measure_planned,
       .print_table_header = &Report::print_epilogue_header,
       .print_row = &Report::print_epilogue_row,
       .row_label = tokens_label,
       .json_row_fields = epilogue_json_fields,
       .bus_bandwidth_footer = false,
       .residual = true,
       .one_rank = true,
       .quant_variants = false,
       .nccl_baseline = std::nullopt,
       .copy_bandwidth = CopyBandwidth::kAlways,
       .tune_group = std::nullopt},
      // NCCL has no quantized epilogue: the op compares the fallback chain with itself.
      {.op = Op::kQuant,
       .name = "quant",
       .shapes = quant_shapes,
       .columns = level_columns,
       .measure_row = measure_levels,
       .print_table_header = &Report::print_quant_header,
       .print_row = &Report::print_quant_row,
       .row_label = variant_label,
       .json_row_fields = quant_json_fields,
       .bus_bandwidth_footer = false,
       .residual = true,
       .one_rank = false,
       .quant_variants = true,
       .nccl_baseline = std::nullopt,
       .copy_bandwidth = CopyBandwidth::kAtWorld1,
       .tune_group = TuningGroup::kQuant},
  };
  return kOps;
}

const OpDescriptor& op_descriptor(Op op) { return op_descriptors().at(static_cast<size_t>(op)); }

bool measures_copy_bandwidth(const OpDescriptor& op, int world) {
  return op.copy_bandwidth == CopyBandwidth::kAlways ||
         (op.copy_bandwidth == CopyBandwidth::kAtWorld1 && world == 1);
}

const char* op_name(Op op) { return op_descriptor(op).name; }

}  // namespace arf::bench
