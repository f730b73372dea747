// -J FILE: {"header": {...run facts...}, "rows": [{...every field of a row...}]}. NaN -> null.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ops.h"
#include "report.h"
#include "summary.h"

namespace arf::bench {
namespace {

using nlohmann::json;

json number(double v) { return std::isnan(v) ? json(nullptr) : json(v); }
json count_or_null(int64_t v) { return v < 0 ? json(nullptr) : json(v); }

json header_json(const BenchArgs& a, const RunHeader& h, const std::vector<std::string>& columns) {
  json devices = json::array();
  for (size_t r = 0; r < h.layout.info.size(); ++r) {
    const DeviceInfo& d = h.layout.info[r];
    devices.push_back({{"rank", r},
                       {"ordinal", d.ordinal},
                       {"name", d.name},
                       {"sm_count", d.sm_count},
                       {"l2_bytes", d.l2_bytes}});
  }
  json j = {{"tool", "arfusion-bench"},
            {"arfusion_version", h.version},
            {"date", h.date},
            {"command_line", a.command_line},
            {"op", op_name(a.op)},
            {"dtype", dtype_name(a.dtype)},
            {"hidden", a.hidden},
            {"hiddens", a.hiddens},
            {"world", h.layout.devices.size()},
            {"virtual_ranks", h.layout.virtual_ranks},
            {"max_ranks_per_device", h.layout.max_ranks_per_device},
            {"transport", h.processes ? "ipc (one process per rank)" : "local (rank threads)"},
            {"devices", devices},
            {"iters", a.iters},
            {"warmup_iters", a.warmup_iters},
            {"graph_replays", a.graph_replays},
            {"repeats", a.repeats},
            {"check", a.check},
            {"input_sets", h.num_input_sets},
            {"input_buffer", a.input_buffer},
            {"columns", columns},
            {"time_definition", "max over ranks of (elapsed / calls), microseconds; with repeats > 1 "
                                "the median over the timed regions (each one's figure in repeats_us)"},
            {"nccl",
             {{"column", h.nccl_label.empty() ? json(nullptr) : json(h.nccl_label)},
              {"note", h.nccl_note}}}};
  if (!h.git_commit.empty()) j["git_commit"] = h.git_commit;
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  j["cuda_device_max_connections"] = connections != nullptr ? json(connections) : json(nullptr);
  const OpDescriptor& op = op_descriptor(a.op);
  if (op.quant_variants) {
    json variants = json::array();
    for (const QuantVariant& v : a.quant) variants.push_back(quant_variant_label(v));
    j["quant_variants"] = variants;
  }
  if (measures_copy_bandwidth(op, static_cast<int>(h.layout.devices.size()))) {
    j["copy_bandwidth_gbps"] = number(h.copy_gbps);
    j["copy_bytes"] = h.copy_bytes;
  }
  return j;
}

// Each repeat's time and their range (--repeats > 1); nothing for a single timed region.
void add_spread(const Cell& c, json* j) {
  if (c.repeats_us.size() < 2) return;
  json each = json::array();
  for (double us : c.repeats_us) each.push_back(number(us));
  (*j)["repeats_us"] = each;
  (*j)["min_us"] = number(*std::min_element(c.repeats_us.begin(), c.repeats_us.end()));
  (*j)["max_us"] = number(*std::max_element(c.repeats_us.begin(), c.repeats_us.end()));
}

json cell_json(const Cell& c, const Row& row, int world) {
  const double algbw = gbps(static_cast<double>(row.bytes), c.us);
  json j = {{"column", c.column},
          {"time_us", number(c.us)},
          {"algbw_gbps", number(algbw)},
          {"busbw_gbps", number(algbw * busbw_factor(world))},
          {"wrong", count_or_null(c.wrong)},
          {"chosen_algorithm", c.chosen},
          {"plan_reason", c.reason},
          {"error", c.error},
          {"unsupported", c.unsupported},
          {"skipped", c.skipped},
          {"mismatch", c.note}};
  add_spread(c, &j);
  return j;
}

}  // namespace

// The quant row's figures under flat names, so a script need not search `results`.
void quant_json_fields(const Row& row, const BenchArgs&, const RunHeader& h, json* j) {
  (*j)["quant"] = row.variant;
  json times = json::object();
  for (const Cell& c : row.cells) times[c.column] = number(c.us);
  (*j)["times_us"] = times;
  (*j)["speedup_3k_1k"] = number(quant_speedup(row));
  if (h.layout.devices.size() != 1) return;
  (*j)["bytes_moved"] = row.bytes_moved;
  (*j)["pct_copy_bandwidth"] = number(quant_pct_copy(row, h.copy_gbps));
}

void fused_json_fields(const Row& row, const BenchArgs&, const RunHeader& h, json* out) {
  json& j = *out;
  const RowSummary s = summarize(row, h.nccl_label);
  j["unfused_us"] = s.unfused != nullptr ? number(s.unfused->us) : json(nullptr);
  j["best_fused"] = s.best_fused != nullptr ? json(s.best_fused->column) : json(nullptr);
  j["best_fused_us"] = s.best_fused != nullptr ? number(s.best_fused->us) : json(nullptr);
  j["speedup"] = number(s.speedup);
  j["auto_us"] = s.auto_cell != nullptr ? number(s.auto_cell->us) : json(nullptr);
  j["auto_algorithm"] = s.auto_cell != nullptr ? json(s.auto_cell->chosen) : json(nullptr);
}

void epilogue_json_fields(const Row& row, const BenchArgs& a, const RunHeader& h, json* out) {
  json& j = *out;
  const Cell& c = row.cells.front();
  const int64_t moved = epilogue_bytes(row.tokens, row.row_elems, dtype_size(a.dtype));
  const double achieved = gbps(static_cast<double>(moved), c.us);
  j["bytes_moved"] = moved;
  j["time_us"] = number(c.us);
  add_spread(c, &j);
  j["achieved_gbps"] = number(achieved);
  j["pct_copy_bandwidth"] = number(100.0 * achieved / h.copy_gbps);
  j["algorithm"] = c.chosen;
}

namespace {

json row_json(const Row& row, const BenchArgs& a, const RunHeader& h) {
  const int world = static_cast<int>(h.layout.devices.size());
  const RowSummary s = summarize(row, h.nccl_label);
  json results = json::array();
  for (const Cell& c : row.cells) results.push_back(cell_json(c, row, world));
  json j = {{"op", op_name(a.op)},
            {"tokens", row.tokens},
            {"hidden", row.row_elems},
            {"count", row.count},
            {"bytes", row.bytes},
            {"type", dtype_name(a.dtype)},
            {"wrong", count_or_null(s.wrong)},
            {"failed", s.failed},
            {"results", results}};
  if (const auto fields = op_descriptor(a.op).json_row_fields) fields(row, a, h, &j);
  return j;
}

}  // namespace

std::string Report::write_json(const std::string& path) const {
  json rows = json::array();
  for (const Row& row : rows_) rows.push_back(row_json(row, args_, header_));
  json header = header_json(args_, header_, columns_);
  header["stopped"] = stopped_.empty() ? json(nullptr) : json(stopped_);
  const json doc = {{"header", header}, {"rows", rows}};
  std::ofstream out(path);
  if (!out) return "cannot open " + path + " for writing";
  out << doc.dump(2) << "\n";
  return out ? "" : "writing " + path + " failed";
}

}  // namespace arf::bench
