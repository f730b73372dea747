// Row summary: wrong-element total, failure flag, unfused vs best fused speedup.
#include "summary.h"

namespace arf::bench {

bool has_time(const Cell& cell) { return cell.error.empty() && !std::isnan(cell.us); }

RowSummary summarize(const Row& row, const std::string& nccl_label) {
  RowSummary s;
  for (const Cell& cell : row.cells) {
    if (cell.wrong >= 0) s.wrong = (s.wrong < 0 ? 0 : s.wrong) + cell.wrong;
    if (!cell.error.empty() && !cell.unsupported) s.failed = true;
    if (cell.column == nccl_label) continue;
    if (cell.column == "unfused") {
      s.unfused = &cell;
    } else {
      if (cell.column == "auto") s.auto_cell = &cell;
      if (has_time(cell) && (s.best_fused == nullptr || cell.us < s.best_fused->us)) {
        s.best_fused = &cell;
      }
    }
  }
  if (s.unfused != nullptr && s.best_fused != nullptr && has_time(*s.unfused)) {
    s.speedup = s.unfused->us / s.best_fused->us;
  }
  return s;
}

double quant_speedup(const Row& row) {
  if (static_cast<int>(row.cells.size()) <= kQuant1k) return NAN;
  const Cell& three = row.cells[kQuant3k];
  const Cell& one = row.cells[kQuant1k];
  return has_time(three) && has_time(one) ? three.us / one.us : NAN;
}

double quant_pct_copy(const Row& row, double copy_gbps) {
  if (static_cast<int>(row.cells.size()) <= kQuant1k || !has_time(row.cells[kQuant1k])) return NAN;
  return 100.0 * gbps(static_cast<double>(row.bytes_moved), row.cells[kQuant1k].us) / copy_gbps;
}

}  // namespace arf::bench
