// Tuned dispatch table: lookup, strict validation, and JSON in and out (schema
// in tuning_table.h). nlohmann-json is used here only, with exceptions off at
// every call (parse with allow_exceptions=false, every field's type checked
// before it is read): src/ throws nothing.
#include "policy/tuning_table.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "base/int_math.h"
#include "base/names.h"

namespace arf {
namespace {

using nlohmann::json;

// ARF_RETURN_IF_ERROR without its file:line context: these errors describe the
// user's table, not our code, and they reach the user verbatim (communicator
// creation fails with them).
#define RETURN_IF_TABLE_ERROR(expr)                                     \
  do {                                                                  \
    if (::arf::Status table_status_ = (expr); !table_status_.is_ok()) { \
      return table_status_;                                             \
    }                                                                   \
  } while (0)

constexpr const char* kFormat = "arfusion-tuning-table";

// The names a table uses; algorithms are spelled as in the API (base/names.h, the table behind
// arfAlgorithmName). A table names only the algorithms auto may choose.
constexpr std::pair<const char*, RankSharing> kSharingNames[] = {
    {"one", RankSharing::kOnePerDevice}, {"shared", RankSharing::kShared}};
constexpr std::pair<const char*, DType> kDtypeNames[] = {{"bf16", DType::kBf16},
                                                         {"fp16", DType::kFp16}};
constexpr std::pair<const char*, TuningGroup> kGroupNames[] = {
    {"plain", TuningGroup::kPlain}, {"quant", TuningGroup::kQuant}, {"allreduce", TuningGroup::kAllReduce}};
// Every algorithm but auto (a table records what auto chooses).
bool is_table_algorithm(Algorithm a) {
  return a != Algorithm::kAuto &&
         algorithm_from_name(algorithm_name(static_cast<arfAlgorithm_t>(a))).has_value();
}

const char* table_algorithm_name(Algorithm a) {
  return is_table_algorithm(a) ? algorithm_name(static_cast<arfAlgorithm_t>(a)) : "?";
}

Status error(const std::string& where, const std::string& what) {
  return invalid_argument("tuning table: " + where + ": " + what);
}

std::string range_where(size_t e, size_t r) {
  return "entries[" + std::to_string(e) + "].ranges[" + std::to_string(r) + "]";
}

Status validate_range(const TuningEntry& entry, size_t e, size_t r) {
  const TuningRange& range = entry.ranges[r];
  const std::string where = range_where(e, r);
  if (r == 0 && range.min_tokens != 1) {
    return error(where, "the first range must start at min_tokens 1, not " +
                            std::to_string(range.min_tokens));
  }
  if (r > 0 && range.min_tokens <= entry.ranges[r - 1].min_tokens) {
    return error(where, "breakpoints not sorted: min_tokens " + std::to_string(range.min_tokens) +
                            " after " + std::to_string(entry.ranges[r - 1].min_tokens));
  }
  if (range.min_tokens > entry.max_tokens) {
    return error(where, "min_tokens " + std::to_string(range.min_tokens) + " exceeds max_tokens " +
                            std::to_string(entry.max_tokens));
  }
  const bool quant = entry.key.group == TuningGroup::kQuant;
  const bool known = is_table_algorithm(range.algorithm);
  if (!known || (quant && range.algorithm == Algorithm::kUnfused)) {
    return error(where, quant ? "a quant range names a fused algorithm (oneshot_lamport, "
                                "oneshot_pull, twoshot) or nccl; unfused is level 3"
                              : "unknown algorithm");
  }
  if (quant && range.algorithm == Algorithm::kNccl && range.level != 3) {
    return error(where, "nccl runs quantized patterns at level 3 only (all-reduce, then norm + "
                        "quant), not level " + std::to_string(range.level));
  }
  if (quant ? (range.level < 1 || range.level > 3) : range.level != 1) {
    return error(where,
                 "level " + std::to_string(range.level) +
                     (quant ? " is not 1, 2 or 3" : " on a plain entry (levels are quant's)"));
  }
  return Status::ok();
}

Status validate_entry(const TuningEntry& entry, size_t e) {
  const std::string where = "entries[" + std::to_string(e) + "]";
  const TuningKey& k = entry.key;
  if (k.world != 1 && k.world != 2 && k.world != 4 && k.world != 8) {
    return error(where, "world " + std::to_string(k.world) + " is not 1, 2, 4 or 8");
  }
  if (k.hidden < kElemsPerVec || k.hidden > kMaxHidden || k.hidden % kElemsPerVec != 0) {
    return error(where, "hidden " + std::to_string(k.hidden) + " is not a multiple of 8 in [8, " +
                            std::to_string(kMaxHidden) + "]");
  }
  if (k.dtype != DType::kBf16 && k.dtype != DType::kFp16)
    return error(where, "dtype not bf16/fp16");
  if (entry.max_tokens < 1) {
    return error(where, "max_tokens " + std::to_string(entry.max_tokens) + " must be >= 1");
  }
  if (entry.ranges.empty()) return error(where, "no ranges");
  for (size_t r = 0; r < entry.ranges.size(); ++r) {
    RETURN_IF_TABLE_ERROR(validate_range(entry, e, r));
  }
  return Status::ok();
}

// ---- JSON -> table; every accessor checks the type first, so nothing throws
// ----

// Rejects fields outside `allowed` and missing ones (all of `allowed` are
// required).
Status check_fields(const json& j, std::initializer_list<const char*> allowed,
                    const std::string& where) {
  if (!j.is_object()) return error(where, "must be a JSON object");
  for (const auto& item : j.items()) {
    if (std::none_of(allowed.begin(), allowed.end(),
                     [&](const char* a) { return item.key() == a; })) {
      return error(where, "unknown field \"" + item.key() + "\"");
    }
  }
  for (const char* a : allowed) {
    if (!j.contains(a)) return error(where, std::string("missing field \"") + a + "\"");
  }
  return Status::ok();
}

Status get_int(const json& j, const char* field, const std::string& where, int64_t* out) {
  const json& v = j.at(field);
  if (!v.is_number_integer())
    return error(where, std::string("\"") + field + "\" must be an integer");
  *out = v.get<int64_t>();
  return Status::ok();
}

Status get_string(const json& j, const char* field, const std::string& where, std::string* out) {
  const json& v = j.at(field);
  if (!v.is_string()) return error(where, std::string("\"") + field + "\" must be a string");
  *out = v.get<std::string>();
  return Status::ok();
}

// Maps a string field through (name, value) pairs; `what` lists the legal names
// for the error.
template <typename T, size_t N>
Status get_enum(const json& j, const char* field, const std::string& where,
                const std::pair<const char*, T> (&names)[N], const char* what, T* out) {
  std::string s;
  RETURN_IF_TABLE_ERROR(get_string(j, field, where, &s));
  for (const auto& [name, value] : names) {
    if (s == name) {
      *out = value;
      return Status::ok();
    }
  }
  return error(where, std::string("unknown ") + field + " \"" + s + "\" (" + what + ")");
}

Status parse_range(const json& j, TuningGroup group, const std::string& where, TuningRange* out) {
  const bool quant = group == TuningGroup::kQuant;
  if (quant) {
    RETURN_IF_TABLE_ERROR(check_fields(j, {"min_tokens", "algorithm", "level"}, where));
  } else {
    RETURN_IF_TABLE_ERROR(check_fields(j, {"min_tokens", "algorithm"}, where));
  }
  RETURN_IF_TABLE_ERROR(get_int(j, "min_tokens", where, &out->min_tokens));
  std::string algorithm;
  RETURN_IF_TABLE_ERROR(get_string(j, "algorithm", where, &algorithm));
  const std::optional<arfAlgorithm_t> named = algorithm_from_name(algorithm);
  if (!named || *named == arfAlgoAuto) {
    return error(where, "unknown algorithm \"" + algorithm +
                            "\" (oneshot_lamport, oneshot_pull, twoshot, unfused)");
  }
  out->algorithm = static_cast<Algorithm>(*named);
  int64_t level = 1;
  if (quant) RETURN_IF_TABLE_ERROR(get_int(j, "level", where, &level));
  if (level < 1 || level > 3)
    return error(where, "level " + std::to_string(level) + " is not 1, 2 or 3");
  out->level = static_cast<int>(level);
  return Status::ok();
}

Status parse_entry(const json& j, const std::string& where, TuningEntry* out) {
  RETURN_IF_TABLE_ERROR(check_fields(
      j, {"world", "ranks_per_device", "dtype", "patterns", "hidden", "max_tokens", "ranges"},
      where));
  int64_t world = 0, hidden = 0;
  RETURN_IF_TABLE_ERROR(get_int(j, "world", where, &world));
  RETURN_IF_TABLE_ERROR(get_int(j, "hidden", where, &hidden));
  // Range-checked here so that the narrowing below is exact; validate_entry
  // says why in words.
  out->key.world = static_cast<int>(std::clamp<int64_t>(world, -1, 1 << 20));
  out->key.hidden = static_cast<int>(std::clamp<int64_t>(hidden, -1, 1 << 30));
  RETURN_IF_TABLE_ERROR(
      get_enum(j, "ranks_per_device", where, kSharingNames, "one, shared", &out->key.sharing));
  RETURN_IF_TABLE_ERROR(get_enum(j, "dtype", where, kDtypeNames, "bf16, fp16", &out->key.dtype));
  RETURN_IF_TABLE_ERROR(
      get_enum(j, "patterns", where, kGroupNames, "plain, quant, allreduce", &out->key.group));
  RETURN_IF_TABLE_ERROR(get_int(j, "max_tokens", where, &out->max_tokens));
  const json& ranges = j.at("ranges");
  if (!ranges.is_array()) return error(where, "\"ranges\" must be an array");
  for (size_t r = 0; r < ranges.size(); ++r) {
    TuningRange range;
    RETURN_IF_TABLE_ERROR(parse_range(ranges[r], out->key.group,
                                      where + ".ranges[" + std::to_string(r) + "]", &range));
    out->ranges.push_back(range);
  }
  return Status::ok();
}

Status parse_document(const json& doc, TuningTable* table) {
  RETURN_IF_TABLE_ERROR(
      check_fields(doc, {"format", "version", "machine", "date", "commit", "entries"}, "document"));
  std::string format;
  RETURN_IF_TABLE_ERROR(get_string(doc, "format", "document", &format));
  if (format != kFormat) return error("document", "format \"" + format + "\" is not " + kFormat);
  int64_t version = 0;
  RETURN_IF_TABLE_ERROR(get_int(doc, "version", "document", &version));
  if (version != kTuningTableVersion) {
    return error("document", "version " + std::to_string(version) +
                                 " is not supported (this "
                                 "library reads version " +
                                 std::to_string(kTuningTableVersion) + ")");
  }
  RETURN_IF_TABLE_ERROR(get_string(doc, "machine", "document", &table->machine));
  RETURN_IF_TABLE_ERROR(get_string(doc, "date", "document", &table->date));
  RETURN_IF_TABLE_ERROR(get_string(doc, "commit", "document", &table->commit));
  const json& entries = doc.at("entries");
  if (!entries.is_array()) return error("document", "\"entries\" must be an array");
  for (size_t e = 0; e < entries.size(); ++e) {
    TuningEntry entry;
    RETURN_IF_TABLE_ERROR(parse_entry(entries[e], "entries[" + std::to_string(e) + "]", &entry));
    table->entries.push_back(std::move(entry));
  }
  return Status::ok();
}

}  // namespace

const char* rank_sharing_name(RankSharing s) {
  return s == RankSharing::kShared ? "shared" : "one";
}

const char* tuning_group_name(TuningGroup g) {
  return g == TuningGroup::kQuant ? "quant" : g == TuningGroup::kAllReduce ? "allreduce" : "plain";
}

std::string describe_key(const TuningKey& k) {
  return "world " + std::to_string(k.world) + ", " +
         (k.sharing == RankSharing::kShared ? "ranks sharing devices" : "one rank per device") +
         ", " + dtype_name(k.dtype) + ", " + tuning_group_name(k.group) + ", hidden " +
         std::to_string(k.hidden);
}

namespace {

// The entry a call of key `call` takes (lookup rule in tuning_table.h), or null.
const TuningEntry* entry_for(const std::vector<TuningEntry>& entries, const TuningKey& call) {
  // An all-reduce takes "allreduce" entries where the table has any for its (world, sharing,
  // dtype), else the "plain" ones.
  TuningGroup group = call.group;
  if (group == TuningGroup::kAllReduce &&
      std::none_of(entries.begin(), entries.end(), [&](const TuningEntry& e) {
        return e.key.world == call.world && e.key.sharing == call.sharing && e.key.dtype == call.dtype &&
               e.key.group == TuningGroup::kAllReduce;
      })) {
    group = TuningGroup::kPlain;
  }
  const TuningEntry* best = nullptr;
  for (const TuningEntry& e : entries) {
    const TuningKey& k = e.key;
    if (k.world != call.world || k.sharing != call.sharing || k.dtype != call.dtype || k.group != group) {
      continue;
    }
    if (best == nullptr) {
      best = &e;
      continue;
    }
    // Nearest hidden; on a tie the larger one. Keys are unique, so the choice
    // is well defined.
    const int64_t d = std::abs(static_cast<int64_t>(k.hidden) - call.hidden);
    const int64_t best_d = std::abs(static_cast<int64_t>(best->key.hidden) - call.hidden);
    if (d < best_d || (d == best_d && k.hidden > best->key.hidden)) best = &e;
  }
  return best;
}

// The range of `entry` holding `tokens` (of the entry's hidden), or nullopt past max_tokens.
std::optional<TuningChoice> choice_at(const TuningEntry& entry, int64_t tokens) {
  if (tokens > entry.max_tokens) return std::nullopt;
  // The last range whose min_tokens <= tokens (ranges start at 1, so there is
  // one).
  auto next = std::upper_bound(entry.ranges.begin(), entry.ranges.end(), tokens,
                               [](int64_t t, const TuningRange& r) { return t < r.min_tokens; });
  if (next == entry.ranges.begin()) return std::nullopt;
  const TuningRange& range = *(next - 1);
  TuningChoice choice;
  choice.algorithm = range.algorithm;
  choice.level = range.level;
  choice.hidden = entry.key.hidden;
  choice.tokens = tokens;
  choice.from_tokens = range.min_tokens;
  choice.to_tokens = next == entry.ranges.end() ? entry.max_tokens : next->min_tokens - 1;
  choice.entry = &entry;
  choice.range = static_cast<size_t>(next - 1 - entry.ranges.begin());
  return choice;
}

}  // namespace

std::optional<TuningChoice> TuningTable::lookup(const TuningKey& call, int64_t num_rows) const {
  const TuningEntry* best = entry_for(entries, call);
  if (best == nullptr || num_rows < 1 || call.hidden < 1) return std::nullopt;
  // Same bytes per rank in the tabulated entry's rows (rounded up: a partial
  // row still moves).
  const int64_t tokens = best->key.hidden == call.hidden
                             ? num_rows
                             : ceil_div(num_rows * call.hidden, best->key.hidden);
  return choice_at(*best, tokens);
}

std::optional<TuningChoice> TuningTable::lookup_elems(const TuningKey& call, int64_t num_elems) const {
  const TuningEntry* best = entry_for(entries, call);
  if (best == nullptr || num_elems < 1) return std::nullopt;
  return choice_at(*best, ceil_div(num_elems, static_cast<int64_t>(best->key.hidden)));
}

Status validate_tuning_table(const TuningTable& table) {
  for (size_t e = 0; e < table.entries.size(); ++e) {
    RETURN_IF_TABLE_ERROR(validate_entry(table.entries[e], e));
    for (size_t other = 0; other < e; ++other) {
      if (table.entries[other].key == table.entries[e].key) {
        return error("entries[" + std::to_string(e) + "]",
                     "duplicate key (" + describe_key(table.entries[e].key) + ") of entries[" +
                         std::to_string(other) + "]");
      }
    }
  }
  return Status::ok();
}

Result<TuningTable> parse_tuning_table(const std::string& json_text) {
  const json doc = json::parse(json_text, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return error("document", "not valid JSON");
  TuningTable table;
  RETURN_IF_TABLE_ERROR(parse_document(doc, &table));
  RETURN_IF_TABLE_ERROR(validate_tuning_table(table));
  return table;
}

Result<std::string> read_tuning_table_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("tuning table: cannot open \"" + path + "\"");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return invalid_argument("tuning table: reading \"" + path + "\" failed");
  return text.str();
}

std::string tuning_table_to_json(const TuningTable& table) {
  json entries = json::array();
  for (const TuningEntry& e : table.entries) {
    json ranges = json::array();
    for (const TuningRange& r : e.ranges) {
      json range = {{"min_tokens", r.min_tokens}, {"algorithm", table_algorithm_name(r.algorithm)}};
      if (e.key.group == TuningGroup::kQuant) range["level"] = r.level;
      ranges.push_back(range);
    }
    entries.push_back({{"world", e.key.world},
                       {"ranks_per_device", rank_sharing_name(e.key.sharing)},
                       {"dtype", dtype_name(e.key.dtype)},
                       {"patterns", tuning_group_name(e.key.group)},
                       {"hidden", e.key.hidden},
                       {"max_tokens", e.max_tokens},
                       {"ranges", ranges}});
  }
  const json doc = {{"format", kFormat},        {"version", kTuningTableVersion},
                    {"machine", table.machine}, {"date", table.date},
                    {"commit", table.commit},   {"entries", entries}};
  // Invalid UTF-8 in a string would make dump() throw; replace it instead.
  return doc.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

#undef RETURN_IF_TABLE_ERROR

}  // namespace arf
