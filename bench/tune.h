// --tune-out FILE (the tuning tool, as a mode of arfusion-bench): turns the rows the
// fused sweep already measured into one tuning-table entry (src/policy/tuning_table.h) and merges
// it into FILE, which the library loads through $ARF_TUNING_TABLE. A mode of the bench rather than
// a separate tool so that the table is derived from exactly the measurement the bench reports
// (same timing loop, same -c check, same JSON), with no second copy of the driver.
//
// Choice per token count: among the measured columns oneshot_lamport, oneshot_pull, twoshot,
// unfused and nccl whose cell has a time, no error and no wrong element, the fastest; any within
// kTieFraction (1%) of it counts as a tie, and ties go to the first in kPreference (simplest first:
// no barrier, then one-phase barriers, then two phases, then two kernels, then NCCL). Adjacent token counts
// with the same choice merge into one range; a range starts at the token count where its choice was
// measured, so counts between two measured ones take the lower one's choice. The sweep must start
// at 1 token.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "export/tool_api.h"
#include "results.h"

namespace arf::bench {

inline constexpr double kTieFraction = 0.01;
inline constexpr arfAlgorithm_t kPreference[] = {arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                                 arfAlgoTwoshot, arfAlgoUnfused, arfAlgoNccl};

// The column chosen for one row, or nullopt (why says so) when no candidate has a valid time.
std::optional<std::string> choose_column(const Row& row, std::string* why);

// One entry for `key` from the sweep's rows (sorted by tokens, the first at 1 token). nullopt and
// *why when a row has no valid candidate or the sweep does not start at 1.
std::optional<TuningEntry> derive_entry(const std::vector<Row>& rows, const TuningKey& key,
                                        std::string* why);

// --op quant: one entry (group quant) from the rows of ONE quant variant and hidden. Per token
// count the fastest valid cell among the level columns 1_kernel, 2_kernels and 3_kernels (the
// norm-side-output column has another output contract and is not a candidate); ties within
// kTieFraction go to the fewer kernels. A range records the level and the fused algorithm that ran
// it: the plan's algorithm at levels 1 and 2, its inner all-reduce at level 3 (nccl stays nccl).
std::optional<TuningEntry> derive_quant_entry(const std::vector<Row>& rows, const TuningKey& key,
                                              std::string* why);

// Replaces the entry with the same key in `table` (or appends it) and stamps the run's facts.
// Refuses ("" = done) a table measured on another machine: one file describes one machine.
std::string merge_entry(TuningTable* table, const TuningEntry& entry, const std::string& machine,
                        const std::string& date, const std::string& commit);

// Reads FILE if it exists (it must then be a valid table), merges `entry` into it, writes it back.
// Returns "" or why not.
std::string write_tuned_entry(const std::string& path, const TuningEntry& entry,
                              const std::string& machine, const std::string& date,
                              const std::string& commit);

// The summary printed after the sweep: the ranges, then per token count the chosen column and
// auto's time relative to the fastest column and to unfused (the goal a table must meet: within
// 3% of the fastest, never slower than unfused), when auto was measured.
std::string tune_summary(const std::vector<Row>& rows, const TuningEntry& entry,
                         const std::string& path);

}  // namespace arf::bench
