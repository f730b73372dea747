// --tune-out: fastest column per token count -> ranges -> one tuning-table entry, merged into FILE.
#include "tune.h"

#include "arfusion/arfusion.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace arf::bench {
namespace {

// Columns are named as the API names algorithms (arfAlgorithmName), and the enums match.
Algorithm algorithm_of(const std::string& column) {
  arfAlgorithm_t a = arfAlgoAuto;
  if (arfAlgorithmFromName(column.c_str(), &a) != arfSuccess) return Algorithm::kAuto;
  return static_cast<Algorithm>(a);
}

const char* column_of(Algorithm algorithm) {
  return arfAlgorithmName(static_cast<arfAlgorithm_t>(algorithm));
}

// A time that may decide: measured, no error, and not found wrong by the check.
bool valid(const Cell& c) { return c.error.empty() && !std::isnan(c.us) && c.wrong <= 0; }

const Cell* find_cell(const Row& row, const std::string& column) {
  for (const Cell& c : row.cells) {
    if (c.column == column) return &c;
  }
  return nullptr;
}

std::string format_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", us);
  return buf;
}

}  // namespace

std::optional<std::string> choose_column(const Row& row, std::string* why) {
  double fastest = INFINITY;
  for (arfAlgorithm_t algorithm : kPreference) {
    const Cell* c = find_cell(row, column_of(static_cast<Algorithm>(algorithm)));
    if (c != nullptr && valid(*c)) fastest = std::min(fastest, c->us);
  }
  if (std::isinf(fastest)) {
    *why = "no algorithm has a valid time at " + std::to_string(row.tokens) + " tokens";
    return std::nullopt;
  }
  for (arfAlgorithm_t algorithm : kPreference) {
    const char* name = column_of(static_cast<Algorithm>(algorithm));
    const Cell* c = find_cell(row, name);
    if (c != nullptr && valid(*c) && c->us <= fastest * (1.0 + kTieFraction)) return name;
  }
  return std::nullopt;  // not reached: the fastest itself qualifies
}

namespace {

// The skeleton both derivations share: the sweep starts at 1 token and increases; `choose` turns a
// row into its range (or nullopt with *why); equal neighbours merge.
template <typename Choose>
std::optional<TuningEntry> derive_ranges(const std::vector<Row>& rows, const TuningKey& key,
                                         std::string* why, Choose&& choose) {
  if (rows.empty() || rows.front().tokens != 1) {
    *why = "the sweep must start at 1 token (a table's first range does)";
    return std::nullopt;
  }
  TuningEntry entry;
  entry.key = key;
  for (const Row& row : rows) {
    if (row.tokens <= entry.max_tokens) {
      *why = "token counts must increase (" + std::to_string(row.tokens) + " after " +
             std::to_string(entry.max_tokens) + ")";
      return std::nullopt;
    }
    const std::optional<TuningRange> range = choose(row);
    if (!range) return std::nullopt;
    if (entry.ranges.empty() || entry.ranges.back().algorithm != range->algorithm ||
        entry.ranges.back().level != range->level) {
      entry.ranges.push_back(*range);
    }
    entry.max_tokens = row.tokens;
  }
  return entry;
}

}  // namespace

std::optional<TuningEntry> derive_entry(const std::vector<Row>& rows, const TuningKey& key,
                                        std::string* why) {
  return derive_ranges(rows, key, why, [&](const Row& row) -> std::optional<TuningRange> {
    const std::optional<std::string> column = choose_column(row, why);
    if (!column) return std::nullopt;
    return TuningRange{row.tokens, algorithm_of(*column), 1};
  });
}

namespace {

// The level columns of --op quant, fewest kernels first (the tie order).
constexpr std::pair<const char*, int> kQuantLevelColumns[] = {
    {"1_kernel", 1}, {"2_kernels", 2}, {"3_kernels", 3}};

// The fastest valid level cell of a quant row (ties to fewer kernels), or nullptr with *why.
const Cell* choose_quant_cell(const Row& row, int* level, std::string* why) {
  double fastest = INFINITY;
  for (const auto& [name, lvl] : kQuantLevelColumns) {
    const Cell* c = find_cell(row, name);
    if (c != nullptr && valid(*c)) fastest = std::min(fastest, c->us);
  }
  for (const auto& [name, lvl] : kQuantLevelColumns) {
    const Cell* c = find_cell(row, name);
    if (c != nullptr && valid(*c) && c->us <= fastest * (1.0 + kTieFraction)) {
      *level = lvl;
      return c;
    }
  }
  *why = "no fallback level has a valid time at " + std::to_string(row.tokens) + " tokens";
  return nullptr;
}

}  // namespace

std::optional<TuningEntry> derive_quant_entry(const std::vector<Row>& rows, const TuningKey& key,
                                              std::string* why) {
  return derive_ranges(rows, key, why, [&](const Row& row) -> std::optional<TuningRange> {
    if (row.variant != rows.front().variant) {
      *why = "one quant variant is needed (" + rows.front().variant + ", then " + row.variant + ")";
      return std::nullopt;
    }
    int level = 0;
    const Cell* cell = choose_quant_cell(row, &level, why);
    if (cell == nullptr) return std::nullopt;
    const std::string& name = level == 3 ? cell->inner : cell->chosen;
    const Algorithm algorithm = algorithm_of(name);
    if (algorithm == Algorithm::kAuto || algorithm == Algorithm::kUnfused) {
      *why = "the " + cell->column + " cell at " + std::to_string(row.tokens) + " tokens ran '" +
             name + "', which a quant range cannot name";
      return std::nullopt;
    }
    return TuningRange{row.tokens, algorithm, level};
  });
}

std::string merge_entry(TuningTable* table, const TuningEntry& entry, const std::string& machine,
                        const std::string& date, const std::string& commit) {
  if (!table->entries.empty() && table->machine != machine) {
    return "the table was measured on \"" + table->machine + "\", this run is on \"" + machine +
           "\": one file describes one machine; write to another file";
  }
  table->machine = machine;
  table->date = date;
  table->commit = commit;
  for (TuningEntry& e : table->entries) {
    if (e.key == entry.key) {
      e = entry;
      return "";
    }
  }
  table->entries.push_back(entry);
  return "";
}

std::string write_tuned_entry(const std::string& path, const TuningEntry& entry,
                              const std::string& machine, const std::string& date,
                              const std::string& commit) {
  TuningTable table;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    Result<std::string> text = read_tuning_table_file(path);
    if (!text.is_ok()) return text.status().message();
    Result<TuningTable> parsed = parse_tuning_table(text.value());
    if (!parsed.is_ok())
      return path + " exists but is not a valid table: " + parsed.status().message();
    table = parsed.take();
  }
  std::string why = merge_entry(&table, entry, machine, date, commit);
  if (!why.empty()) return path + ": " + why;
  if (Status s = validate_tuning_table(table); !s.is_ok()) return s.message();
  std::ofstream out(path);
  if (!out) return "cannot open " + path + " for writing";
  out << tuning_table_to_json(table);
  return out ? "" : "writing " + path + " failed";
}

std::string tune_summary(const std::vector<Row>& rows, const TuningEntry& entry,
                         const std::string& path) {
  std::string s = "# tuning table entry (" + describe_key(entry.key) + ") -> " + path + "\n";
  for (size_t r = 0; r < entry.ranges.size(); ++r) {
    const int64_t to =
        r + 1 < entry.ranges.size() ? entry.ranges[r + 1].min_tokens - 1 : entry.max_tokens;
    s += "#   tokens " + std::to_string(entry.ranges[r].min_tokens) + ".." + std::to_string(to) +
         ": " + column_of(entry.ranges[r].algorithm);
    if (entry.key.group == TuningGroup::kQuant) {
      s += " at level " + std::to_string(entry.ranges[r].level);
    }
    s += "\n";
  }
  if (entry.key.group == TuningGroup::kQuant) {
    for (const Row& row : rows) {
      int level = 0;
      std::string why;
      const Cell* c = choose_quant_cell(row, &level, &why);
      s += "#   " + std::to_string(row.tokens) + " tokens: " +
           (c != nullptr ? c->column + " (" + (level == 3 ? c->inner : c->chosen) + ") " +
                               format_us(c->us) + " us"
                         : why) +
           "\n";
    }
    return s;
  }
  // auto as this run measured it (with $ARF_TUNING_TABLE set: the table being checked).
  double worst_gap = 0;
  bool auto_measured = false, auto_beats_unfused = true;
  for (const Row& row : rows) {
    std::string why;
    const std::optional<std::string> column = choose_column(row, &why);
    const Cell* chosen = column ? find_cell(row, *column) : nullptr;
    const Cell* automatic = find_cell(row, "auto");
    const Cell* unfused = find_cell(row, "unfused");
    s += "#   " + std::to_string(row.tokens) + " tokens: " + (column ? *column : why);
    if (chosen != nullptr) s += " " + format_us(chosen->us) + " us";
    if (chosen != nullptr && automatic != nullptr && valid(*automatic)) {
      auto_measured = true;
      const double gap = 100.0 * (automatic->us / chosen->us - 1.0);
      worst_gap = std::max(worst_gap, gap);
      s += "; auto (" + automatic->chosen + ") " + format_us(automatic->us) + " us, " +
           (gap >= 0 ? "+" : "") + format_us(gap) + "%";
      if (unfused != nullptr && valid(*unfused) && automatic->us > unfused->us) {
        auto_beats_unfused = false;
        s += " SLOWER THAN UNFUSED";
      }
    }
    s += "\n";
  }
  if (auto_measured) {
    s += "# auto vs the fastest column: worst " + format_us(worst_gap) + "% (goal <= 3%), " +
         (auto_beats_unfused ? "never slower than unfused" : "slower than unfused somewhere") +
         (worst_gap <= 3.0 && auto_beats_unfused ? ": GOAL MET\n" : ": goal NOT met\n");
  }
  return s;
}

}  // namespace arf::bench
