// Plan -> gate -> time for the four fallback-chain columns of one quant shape.
#include "quant_measure.h"

#include <algorithm>

#include "measure.h"
#include "quant_check.h"

namespace arf::bench {
namespace {

CallSpec column_spec(const CallSpec& shape, const QuantColumn& column) {
  CallSpec spec = shape;
  spec.fallback = column.level;
  spec.norm_side_output = column.norm_side_output;
  return spec;
}

// arfPlan is pure and rank-symmetric, so rank 0's answer is every rank's; asking first keeps a
// refused level from ever launching. A plan that runs another level than the forced one would
// mislabel the column, so it is an error rather than a time.
Cell plan_cell(BenchContext& ctx, const CallSpec& spec, const char* column) {
  arfPlan_t plan;
  Cell cell = planned_cell(ctx, spec, column, &plan);
  if (!cell.error.empty()) return cell;
  if (plan.fallback_level != static_cast<int>(spec.fallback)) {
    cell.error = "plan reports fallback level " + std::to_string(plan.fallback_level);
  }
  return cell;
}

bool runnable(const Cell& cell) { return cell.error.empty() && !cell.skipped; }

// The gate over every runnable column at once (they must agree with each other). A failed check
// marks every runnable cell, so none of them is timed.
void gate(BenchContext& ctx, const std::vector<CallSpec>& specs, uint64_t* call, Row* row) {
  std::vector<CallSpec> calls;
  std::vector<size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (runnable(row->cells[i])) {
      calls.push_back(specs[i]);
      index.push_back(i);
    }
  }
  if (calls.empty()) return;
  const QuantCheckResult check = check_quant(ctx, calls, ++*call);
  for (size_t k = 0; k < index.size(); ++k) {
    Cell& cell = row->cells[index[k]];
    if (!check.error.empty()) {
      cell.error = check.error;
      continue;
    }
    cell.wrong = check.wrong[k];
    cell.note = check.detail[k];
  }
}

}  // namespace

std::vector<CallSpec> quant_shapes(const BenchArgs& args) {
  std::vector<CallSpec> shapes;
  for (const QuantVariant& v : args.quant) {
    for (int64_t hidden : args.hiddens) {
      for (int64_t tokens : args.tokens) {
        CallSpec s;
        s.pattern = v.pattern;
        s.scale_layout = v.layout;
        s.scale_format = v.format;
        s.num_tokens = tokens;
        s.hidden = hidden;
        shapes.push_back(s);
      }
    }
  }
  return shapes;
}

int64_t quant_scale_capacity(const std::vector<CallSpec>& shapes) {
  int64_t bytes = 0;
  for (const CallSpec& s : shapes) bytes = std::max(bytes, s.scale_bytes());
  return bytes;
}

int64_t quant_bytes_moved(const CallSpec& shape, size_t elem_bytes) {
  const int64_t elem = static_cast<int64_t>(elem_bytes);
  return (3 * shape.elems() + shape.hidden) * elem + shape.quant_bytes() + shape.scale_bytes();
}

Row measure_quant_row(BenchContext& ctx, const CallSpec& shape, const TimingConfig& cfg,
                      uint64_t* call, std::string* stopped) {
  Row row;
  row.variant = quant_variant_label({shape.pattern, shape.scale_layout, shape.scale_format});
  row.tokens = shape.num_tokens;
  row.row_elems = shape.hidden;
  row.count = shape.elems();
  row.bytes = shape.elems() * static_cast<int64_t>(dtype_size(ctx.args->dtype));
  row.bytes_moved = quant_bytes_moved(shape, dtype_size(ctx.args->dtype));
  std::vector<CallSpec> specs;
  for (const QuantColumn& column : kQuantColumns) {
    specs.push_back(column_spec(shape, column));
    row.cells.push_back(plan_cell(ctx, specs.back(), column.name));
  }
  if (ctx.args->check != 0 && stopped->empty()) {
    gate(ctx, specs, call, &row);
    *stopped = first_failed_comm(ctx);
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    Cell& cell = row.cells[i];
    if (!stopped->empty()) {
      cell.skipped = true;
      cell.error = "not run: a communicator failed earlier";
      continue;
    }
    if (!runnable(cell)) continue;
    const CallSpec& spec = specs[i];
    const Timing t = time_collective(
        *ctx.pool, ctx.streams,
        [&](int rank, int k, cudaStream_t) { return enqueue_call(ctx, spec, rank, k); },
        [&](int rank) { return comm_health(ctx, rank); }, cfg);
    cell.us = t.max_us;
    cell.repeats_us = t.repeat_us;
    cell.error = t.error;
    *stopped = first_failed_comm(ctx);
  }
  return row;
}

}  // namespace arf::bench
