// The tuned dispatch table: measured choices of algorithm (and, for quantized patterns, fallback
// level) by call size. Two tables of this format are in play: the built-in defaults
// (default_tuning_table.json, embedded in the library: policy/default_tuning_table.h) and a tuned
// table written by `arfusion-bench --tune-out FILE`, loaded by rank 0 from $ARF_TUNING_TABLE at
// communicator creation and shared with every rank through the rendezvous, so every rank plans with
// the same immutable table (plans must be identical on every rank). Where the tuned table has an
// entry it replaces the defaults.
//
// Schema (JSON, version 1; every field required unless marked, unknown fields are errors):
//   { "format": "arfusion-tuning-table", "version": 1,
//     "machine": "NVIDIA H200", "date": "2026-12-01T10:00:00+0000", "commit": "abc1234",
//     "entries": [ { "world": 8, "ranks_per_device": "one" | "shared", "dtype": "bf16" | "fp16",
//                    "patterns": "plain" | "quant" | "allreduce", "hidden": 8192,
//                    "max_tokens": 4096,
//                    "ranges": [ { "min_tokens": 1, "algorithm": "oneshot_lamport" },
//                                { "min_tokens": 64, "algorithm": "twoshot" } ] } ] }
// A range holds from its min_tokens to the next range's min_tokens - 1, the last one to the
// entry's max_tokens (the largest token count measured). "plain" covers allreduce and
// residual_rmsnorm (algorithms oneshot_lamport, oneshot_pull, twoshot, unfused); "allreduce" the
// plain all-reduce alone (where a table has "allreduce" entries for a (world, ranks_per_device,
// dtype), an all-reduce takes those instead of the "plain" ones); "quant" covers the quantized
// patterns, and each of its ranges also names the fallback "level" 1, 2 or 3 (algorithm then is
// the fused one: level 3 runs it as the inner all-reduce of unfused).
//
// Lookup (TuningTable::lookup): the entry of the call's (world, ranks_per_device class, dtype,
// pattern group) with the call's hidden; if none, the one with the nearest hidden (ties: the larger
// hidden), with the call's token count converted to the same bytes per rank (rows * hidden /
// tabulated hidden, rounded up) since crossovers follow bytes. Then the range holding that token
// count. No entry, or a count outside [1, max_tokens] -> no opinion. The defaults are read by
// exact bytes per rank instead (lookup_elems): their crossovers are sizes, written as tokens of
// their entry's hidden.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "common/kernel_params.h"

namespace arf {

// The environment variable naming the table file rank 0 loads (arfusion.h lists
// it).
inline constexpr const char* kTuningTableEnv = "ARF_TUNING_TABLE";
inline constexpr int kTuningTableVersion = 1;

enum class RankSharing : int { kOnePerDevice = 0, kShared = 1 };  // max_ranks_per_device 1 / > 1
// kPlain: allreduce and residual_rmsnorm; kAllReduce: the plain all-reduce alone (before kPlain
// where a table has it); kQuant: the quantized patterns.
enum class TuningGroup : int { kPlain = 0, kQuant = 1, kAllReduce = 2 };

inline RankSharing sharing_of(int max_ranks_per_device) {
  return max_ranks_per_device > 1 ? RankSharing::kShared : RankSharing::kOnePerDevice;
}
// A call's group: what its pattern looks up first (an all-reduce falls back to kPlain).
inline TuningGroup tuning_group_of(Pattern p) {
  return is_quant_pattern(p)          ? TuningGroup::kQuant
         : p == Pattern::kAllReduce ? TuningGroup::kAllReduce
                                    : TuningGroup::kPlain;
}

struct TuningKey {
  int world = 1;
  RankSharing sharing = RankSharing::kOnePerDevice;
  DType dtype = DType::kBf16;
  TuningGroup group = TuningGroup::kPlain;
  int hidden = 0;
  bool operator==(const TuningKey&) const = default;
};

struct TuningRange {
  int64_t min_tokens = 1;
  Algorithm algorithm = Algorithm::kOneshotLamport;
  int level = 1;  // quant entries: fallback level 1..3; plain entries: always 1
  bool operator==(const TuningRange&) const = default;
};

struct TuningEntry {
  TuningKey key;
  int64_t max_tokens = 0;
  std::vector<TuningRange> ranges;  // min_tokens strictly increasing, the first 1
  bool operator==(const TuningEntry&) const = default;
};

// What the table says for one call; `hidden` is the tabulated hidden it came
// from and [from_tokens, to_tokens] the range, in that entry's tokens, that
// held the converted count.
struct TuningChoice {
  Algorithm algorithm = Algorithm::kOneshotLamport;
  int level = 1;
  int hidden = 0;
  int64_t tokens = 0;  // the call's count converted to `hidden`'s bytes per rank
  int64_t from_tokens = 0;
  int64_t to_tokens = 0;
  const TuningEntry* entry = nullptr;  // the entry, in the table looked up (valid while it lives)
  size_t range = 0;                    // the range's index in entry->ranges
};

// The whole table. Immutable once loaded; shared (shared_ptr<const>) by the
// ranks of a communicator.
struct TuningTable {
  std::string machine;
  std::string date;
  std::string commit;
  std::vector<TuningEntry> entries;
  bool operator==(const TuningTable&) const = default;

  // Pure: see the lookup rule above. nullopt = no opinion (the built-in
  // defaults apply).
  std::optional<TuningChoice> lookup(const TuningKey& call_key, int64_t num_rows) const;
  // The same entry, the call's size taken as num_elems elements per rank exactly: tokens =
  // ceil(num_elems / the entry's hidden), whatever the call's row width (a flat all-reduce's last
  // row may be partial). How the defaults are read. nullopt when num_elems < 1.
  std::optional<TuningChoice> lookup_elems(const TuningKey& call_key, int64_t num_elems) const;
};

// Strict checks of a table built in memory (the tool's output, a test's
// fixture): worlds 1/2/4/8, hidden a multiple of 8 in [8, kMaxHidden],
// max_tokens >= 1, ranges non-empty, starting at 1, strictly increasing and <=
// max_tokens, algorithms and levels legal for the pattern group, no two entries
// with one key. InvalidArgument naming the entry and range.
Status validate_tuning_table(const TuningTable& table);

// Parses and validates JSON text (schema above). InvalidArgument "tuning table:
// ..." on any error.
Result<TuningTable> parse_tuning_table(const std::string& json_text);

// Reads a file's bytes; InvalidArgument naming the path when it cannot be read.
Result<std::string> read_tuning_table_file(const std::string& path);

// The table as JSON text (2-space indented), which parse_tuning_table reads
// back equal.
std::string tuning_table_to_json(const TuningTable& table);

// Names used in the JSON, the reasons and the tool's summary.
const char* rank_sharing_name(RankSharing s);
const char* tuning_group_name(TuningGroup g);
std::string describe_key(
    const TuningKey& key);  // "world 8, one rank per device, bf16, plain, hidden 8192"

}  // namespace arf
