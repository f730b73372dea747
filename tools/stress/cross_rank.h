// Cross-rank comparison of the per-call output hashes (counters.h TableEntry), in one process
// (the tables copied back after the run) and across the processes of an arfusion-run job (one
// small file per rank in a shared directory; rank 0 compares). No sockets of our own: the ranks
// share a host, so a directory is the simplest channel, and the files are written to a temporary
// name and renamed, so a reader never sees half a file.
//
// Which slots are compared: only calls that completed on every rank with outputs that must match
// (residual/gamma identical on all ranks): slot s holds calls s, s + T, s + 2T, ... (T =
// table_calls) below `issued`; it is compared when all of them lie below `limit` (the first lost
// call of any rank after an error, else issued) and every rank checked it and marked it
// comparable. A slot checked on some ranks but not others, or comparable on some only, is a
// mismatch too (the schedules diverged).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "counters.h"

namespace arf::stress {

struct CrossRankResult {
  uint64_t compared = 0;
  uint64_t mismatched = 0;
  int64_t first_slot = -1;  // lowest mismatching slot (= call index unless folded)
  int first_rank = -1;      // the first rank that differs from rank 0 there
  bool folded = false;      // issued > table slots: slots hold several calls
  std::string error;        // the exchange failed (then nothing was compared)
};

CrossRankResult compare_tables(const std::vector<std::vector<TableEntry>>& tables, uint64_t issued,
                               uint64_t limit);

struct RankTable {
  int rank = 0;
  int world = 0;
  int repeat = 0;
  uint64_t issued = 0;
  uint64_t first_lost = UINT64_MAX;
  std::vector<TableEntry> table;
};

std::string hash_file_path(const std::string& dir, int repeat, int rank);
// "" on success, else why.
std::string write_rank_table(const std::string& dir, const RankTable& t);
std::string read_rank_table(const std::string& path, RankTable* t);

// Rank 0 of a process job: waits (polling, up to `seconds`) for every rank's file of `repeat`,
// reads them, removes them, and compares what every rank completed.
CrossRankResult exchange_and_compare(const std::string& dir, const RankTable& mine, double seconds);

}  // namespace arf::stress
