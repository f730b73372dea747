// Table printing (JSON is in report_json.cc). Column widths follow nccl-tests where the columns are
// nccl-tests'; unmeasured cells print n/a (the planner refused the algorithm) or err (see footer).
#include "report.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "ops.h"
#include "summary.h"

namespace arf::bench {
namespace {

constexpr int kAlgoNameWidth = 16;

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, value);
  return buf;
}

std::string cell_value(const Cell& c, double value, const char* fmt) {
  if (c.unsupported) return "n/a";
  if (c.skipped) return "skip";
  if (!c.error.empty()) return "err";
  return format(fmt, value);
}

std::string wrong_text(int64_t wrong, bool failed) {
  if (wrong < 0) return failed ? "err" : "-";
  return std::to_string(wrong);
}

std::string right(const std::string& text, int width) {
  return std::string(std::max<int>(0, width - static_cast<int>(text.size())), ' ') + text;
}

int time_width(const std::string& column) {
  return std::max<int>(9, static_cast<int>(column.size()));
}

std::string virtual_note(const RankLayout& layout) {
  if (!layout.virtual_ranks) return "";
  const std::set<int> gpus(layout.devices.begin(), layout.devices.end());
  const std::string n = std::to_string(layout.devices.size());
  if (gpus.size() == 1) {
    return "NOTE: " + n +
           " virtual ranks on one GPU — timings exercise the protocol through HBM, "
           "not NVLink";
  }
  return "NOTE: " + n + " ranks on " + std::to_string(gpus.size()) + " GPUs (up to " +
         std::to_string(layout.max_ranks_per_device) +
         " per GPU) — ranks that share a GPU exchange data through HBM, not NVLink";
}

std::string hidden_text(const BenchArgs& args) {
  std::string text;
  for (int64_t h : args.hiddens) text += (text.empty() ? "" : ",") + std::to_string(h);
  return text;
}

constexpr int kQuantLabelWidth = 26;  // "fp8_group/row/ue8m0_packed"

}  // namespace

Report::Report(const BenchArgs& args, const RunHeader& header, std::vector<std::string> columns)
    : args_(args), header_(header), columns_(std::move(columns)) {}

void Report::print_header() const {
  if (quiet_) return;
  std::printf("# arfusion-bench: arfusion %s%s%s, %s\n", header_.version.c_str(),
              header_.git_commit.empty() ? "" : " commit ", header_.git_commit.c_str(),
              header_.date.c_str());
  std::printf("# op %s, dtype %s, hidden %s, nranks %zu\n", op_name(args_.op),
              dtype_name(args_.dtype), hidden_text(args_).c_str(), header_.layout.devices.size());
  std::printf("# iters %d, warmup %d, ", args_.iters, args_.warmup_iters);
  if (args_.graph_replays > 0) {
    std::printf("cudagraph: %d replay(s) of %d captured calls per rank", args_.graph_replays,
                args_.iters);
  } else {
    std::printf("eager launches");
  }
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (args_.repeats > 1) std::printf(", %d timed regions per cell (time: their median)", args_.repeats);
  std::printf(", check %d, input sets %d%s, CUDA_DEVICE_MAX_CONNECTIONS=%s\n", args_.check,
              header_.num_input_sets, args_.input_buffer ? " (the communicators' input buffers)" : "",
              connections != nullptr ? connections : "(default)");
  for (size_t r = 0; r < header_.layout.info.size(); ++r) {
    const DeviceInfo& d = header_.layout.info[r];
    std::printf("#  Rank %2zu device %2d [%s] %d SMs\n", r, d.ordinal, d.name.c_str(), d.sm_count);
  }
  if (header_.processes) {
    std::printf("# transport ipc: one process per rank (arfusion-run); barriers and results travel "
                "over a Unix socket, rank 0 reports\n");
    if (header_.layout.virtual_ranks) {
      std::printf("# NOTE: processes sharing a GPU time-slice it: the checks hold, the times do "
                  "not measure the collective\n");
    }
  }
  const std::string note = virtual_note(header_.layout);
  if (!note.empty()) std::printf("# %s\n", note.c_str());
  if (!header_.nccl_note.empty()) std::printf("# %s\n", header_.nccl_note.c_str());
  std::printf(
      "# time(us) = max over ranks of (elapsed / calls); each rank times its own stream "
      "with CUDA events after a host barrier\n#\n");
  (this->*op_descriptor(args_.op).print_table_header)();
  std::fflush(stdout);
}

void Report::print_allreduce_header() const {
  std::printf("#%32s", "");
  for (const std::string& c : columns_) std::printf(" %33s", c.c_str());
  std::printf("\n#%11s %13s %6s", "size", "count", "type");
  for (size_t i = 0; i < columns_.size(); ++i) {
    std::printf("  %8s %7s %7s %7s", "time", "algbw", "busbw", "#wrong");
  }
  std::printf("\n#%11s %13s %6s", "(B)", "(elements)", "");
  for (size_t i = 0; i < columns_.size(); ++i) {
    std::printf("  %8s %7s %7s %7s", "(us)", "(GB/s)", "(GB/s)", "");
  }
  std::printf("\n");
}

void Report::print_allreduce_row(const Row& row) const {
  const double factor = busbw_factor(static_cast<int>(header_.layout.devices.size()));
  std::printf("%12lld %13lld %6s", static_cast<long long>(row.bytes),
              static_cast<long long>(row.count), dtype_name(args_.dtype));
  for (const Cell& c : row.cells) {
    const double algbw = gbps(static_cast<double>(row.bytes), c.us);
    std::printf("  %8s %7s %7s %7s", cell_value(c, c.us, "%.2f").c_str(),
                cell_value(c, algbw, "%.2f").c_str(), cell_value(c, algbw * factor, "%.2f").c_str(),
                wrong_text(c.wrong, !c.error.empty() && !c.unsupported).c_str());
  }
  std::printf("\n");
}

std::vector<int> Report::fused_display_order() const {
  std::vector<int> order;
  auto add_if = [&](auto pred) {
    for (int i = 0; i < static_cast<int>(columns_.size()); ++i) {
      if (pred(columns_[i])) order.push_back(i);
    }
  };
  const std::string& nccl = header_.nccl_label;
  add_if([](const std::string& c) { return c == "unfused"; });
  add_if([&](const std::string& c) { return c != "unfused" && c != "auto" && c != nccl; });
  add_if([](const std::string& c) { return c == "auto"; });
  add_if([&](const std::string& c) { return !nccl.empty() && c == nccl; });
  return order;
}

void Report::print_fused_header() const {
  std::string names = "#  tokens  hidden        bytes";
  std::string units = "#                          (B)";
  for (int i : fused_display_order()) {
    const std::string& c = columns_[i];
    names += " " + right(c, time_width(c));
    units += " " + right("(us)", time_width(c));
    if (c == "auto") {
      names += " " + right("auto_algo", kAlgoNameWidth);
      units += " " + right("", kAlgoNameWidth);
    }
  }
  std::printf("%s  speedup   #wrong\n%s      (x)\n", names.c_str(), units.c_str());
}

void Report::print_fused_row(const Row& row) const {
  const RowSummary s = summarize(row, header_.nccl_label);
  std::printf("%9lld %7lld %12lld", static_cast<long long>(row.tokens),
              static_cast<long long>(row.row_elems), static_cast<long long>(row.bytes));
  for (int i : fused_display_order()) {
    const Cell& c = row.cells[i];
    std::printf(" %*s", time_width(c.column), cell_value(c, c.us, "%.2f").c_str());
    if (c.column == "auto")
      std::printf(" %*s", kAlgoNameWidth, c.chosen.empty() ? "-" : c.chosen.c_str());
  }
  const std::string speedup = std::isnan(s.speedup) ? "-" : format("%.2f", s.speedup);
  std::printf(" %8s %8s\n", speedup.c_str(), wrong_text(s.wrong, s.failed).c_str());
}

void Report::print_copy_bandwidth() const {
  std::printf(
      "# D2D copy bandwidth: %.1f GB/s (cudaMemcpyAsync of %.2f GiB, read + write bytes "
      "counted, median of 5)\n#\n",
      header_.copy_gbps, static_cast<double>(header_.copy_bytes) / (1 << 30));
}

void Report::print_epilogue_header() const {
  print_copy_bandwidth();
  std::printf("#  tokens  hidden  bytes_moved      time  achieved   %%copy %*s   #wrong\n",
              kAlgoNameWidth, "algo");
  std::printf("#                          (B)      (us)    (GB/s)     (%%)\n");
}

void Report::print_epilogue_row(const Row& row) const {
  const Cell& c = row.cells.front();
  const int64_t moved = epilogue_bytes(row.tokens, row.row_elems, dtype_size(args_.dtype));
  const double achieved = gbps(static_cast<double>(moved), c.us);
  std::printf("%9lld %7lld %12lld %9s %9s %7s %*s %8s\n", static_cast<long long>(row.tokens),
              static_cast<long long>(row.row_elems), static_cast<long long>(moved),
              cell_value(c, c.us, "%.2f").c_str(), cell_value(c, achieved, "%.1f").c_str(),
              cell_value(c, 100.0 * achieved / header_.copy_gbps, "%.1f").c_str(), kAlgoNameWidth,
              c.chosen.empty() ? "-" : c.chosen.c_str(),
              wrong_text(c.wrong, !c.error.empty() && !c.unsupported).c_str());
  if (c.repeats_us.size() > 1) {  // the spread of the timed regions, under the row
    const auto [lo, hi] = std::minmax_element(c.repeats_us.begin(), c.repeats_us.end());
    std::printf("#   %zu timed regions: %.2f..%.2f us\n", c.repeats_us.size(), *lo, *hi);
  }
}

void Report::print_quant_header() const {
  if (world1()) print_copy_bandwidth();
  std::string names = "# " + std::string(kQuantLabelWidth - 2, ' ') + "  tokens  hidden";
  std::string units = "# " + std::string(kQuantLabelWidth - 2, ' ') + "                ";
  names.replace(2, 5, "quant");
  for (const std::string& c : columns_) {
    names += " " + right(c, time_width(c));
    units += " " + right("(us)", time_width(c));
  }
  names += "    3k/1k";
  units += "      (x)";
  if (world1()) {
    names += "   %copy";
    units += "     (%)";
  }
  std::printf("%s   #wrong\n%s\n", names.c_str(), units.c_str());
}

void Report::print_quant_row(const Row& row) const {
  std::printf("%-*s %7lld %7lld", kQuantLabelWidth, row.variant.c_str(),
              static_cast<long long>(row.tokens), static_cast<long long>(row.row_elems));
  for (const Cell& c : row.cells) {
    std::printf(" %*s", time_width(c.column), cell_value(c, c.us, "%.2f").c_str());
  }
  const double speedup = quant_speedup(row);
  std::printf(" %8s", std::isnan(speedup) ? "-" : format("%.2f", speedup).c_str());
  if (world1()) {
    const double pct = quant_pct_copy(row, header_.copy_gbps);
    std::printf(" %7s", std::isnan(pct) ? "-" : format("%.1f", pct).c_str());
  }
  const RowSummary s = summarize(row, header_.nccl_label);
  std::printf(" %8s\n", wrong_text(s.wrong, s.failed).c_str());
}

void Report::add_row(Row row) {
  rows_.push_back(std::move(row));
  if (quiet_) return;
  (this->*op_descriptor(args_.op).print_row)(rows_.back());
  std::fflush(stdout);
}

void Report::print_footer() const {
  if (quiet_) return;
  if (op_descriptor(args_.op).bus_bandwidth_footer) {
    const double factor = busbw_factor(static_cast<int>(header_.layout.devices.size()));
    for (size_t i = 0; i < columns_.size(); ++i) {
      double sum = 0;
      int n = 0;
      for (const Row& row : rows_) {
        if (!has_time(row.cells[i])) continue;
        sum += gbps(static_cast<double>(row.bytes), row.cells[i].us) * factor;
        ++n;
      }
      std::printf("# Avg bus bandwidth %-16s: %s\n", columns_[i].c_str(),
                  n > 0 ? format("%.3f", sum / n).c_str() : "-");
    }
  }
  std::map<std::string, std::string> refused;  // first refusal per column; they repeat by design
  int64_t wrong = 0;
  for (const Row& row : rows_) {
    const std::string where = op_descriptor(args_.op).row_label(row);
    for (const Cell& c : row.cells) {
      wrong += std::max<int64_t>(0, c.wrong);
      if (c.unsupported) {
        refused.emplace(c.column, "first at " + where + ": " + c.error);
      } else if (!c.error.empty() && !c.skipped) {
        std::printf("# err   %s at %s: %s\n", c.column.c_str(), where.c_str(), c.error.c_str());
      }
      if (!c.note.empty()) {
        std::printf("# wrong %s at %s: %lld elements; first: %s\n", c.column.c_str(), where.c_str(),
                    static_cast<long long>(c.wrong), c.note.c_str());
      }
    }
  }
  for (const auto& [column, why] : refused) {
    std::printf("# n/a   %s (refused by the planner) %s\n", column.c_str(), why.c_str());
  }
  if (!stopped_.empty()) {
    std::printf("# Sweep stopped, later rows not measured: communicator failed (%s)\n",
                stopped_.c_str());
  }
  if (args_.check != 0) {
    std::printf("# Wrong elements: %lld %s\n", static_cast<long long>(wrong),
                all_passed() ? "OK" : "FAILED");
  } else {
    std::printf("# Outputs not verified (-c 0)%s\n", all_passed() ? "" : "; some cells FAILED");
  }
  std::fflush(stdout);
}

bool Report::all_passed() const {
  if (!stopped_.empty()) return false;
  for (const Row& row : rows_) {
    const RowSummary s = summarize(row, header_.nccl_label);
    if (s.failed || s.wrong > 0) return false;
  }
  return true;
}

}  // namespace arf::bench
