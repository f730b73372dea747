// CPU tests of the cross-rank comparison and the hash files (cross_rank.h), and of the verdict
// rules (report.h: wrong elements below the first lost call, exit codes).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "cross_rank.h"
#include "report.h"

namespace arf::stress {
namespace {

std::vector<TableEntry> table(uint64_t slots, uint64_t calls, uint64_t salt = 0) {
  std::vector<TableEntry> t(slots, TableEntry{});
  for (uint64_t c = 0; c < calls; ++c) {
    TableEntry& e = t[c % slots];
    e.hash += c * 0x9E3779B97F4A7C15ull + salt * (c == 7 ? 1 : 0);
    e.flags |= kSlotChecked | kSlotComparable;
  }
  return t;
}

TEST(StressCrossRank, EqualTablesMatch) {
  const auto a = table(100, 80);
  const CrossRankResult r = compare_tables({a, a, a}, 80, 80);
  EXPECT_EQ(r.compared, 80u);
  EXPECT_EQ(r.mismatched, 0u);
  EXPECT_FALSE(r.folded);
}

TEST(StressCrossRank, ADifferentHashIsFoundWithItsRank) {
  const auto a = table(100, 80), b = table(100, 80, /*salt=*/5);
  const CrossRankResult r = compare_tables({a, a, b, a}, 80, 80);
  EXPECT_EQ(r.mismatched, 1u);
  EXPECT_EQ(r.first_slot, 7);
  EXPECT_EQ(r.first_rank, 2);
}

TEST(StressCrossRank, LimitFoldingAndComparability) {
  const auto a = table(100, 80), b = table(100, 80, 5);
  // Calls at or after the first lost call (here 7) are not compared.
  EXPECT_EQ(compare_tables({a, b}, 80, 7).mismatched, 0u);
  EXPECT_EQ(compare_tables({a, b}, 80, 7).compared, 7u);
  // A slot whose outputs legitimately differ (per-rank residual) is skipped on every rank...
  auto c = a, d = b;
  c[7].flags = d[7].flags = kSlotChecked;
  EXPECT_EQ(compare_tables({c, d}, 80, 80).mismatched, 0u);
  // ... but a rank that checked a call the others did not, or disagrees on comparability, differs.
  d[7].flags = kSlotChecked | kSlotComparable;
  EXPECT_EQ(compare_tables({c, d}, 80, 80).mismatched, 1u);
  auto e = a;
  e[3].flags = 0;
  EXPECT_EQ(compare_tables({a, e}, 80, 80).first_slot, 3);
  // Folded: 250 calls in 100 slots; with a loss at call 230 only slots whose calls all lie below it.
  const auto f = table(100, 250), g = table(100, 250, 5);
  const CrossRankResult r = compare_tables({f, g}, 250, 230);
  EXPECT_TRUE(r.folded);
  EXPECT_EQ(r.compared, 80u);  // slots 30..49 hold calls 230..249
  EXPECT_EQ(r.first_slot, 7);
}

TEST(StressCrossRank, FilesRoundTripAndRankZeroCompares) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("stress_test_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  RankTable mine;
  mine.rank = 0;
  mine.world = 3;
  mine.repeat = 1;
  mine.issued = 80;
  mine.table = table(100, 80);
  RankTable r1 = mine, r2 = mine;
  r1.rank = 1;
  r2.rank = 2;
  r2.table = table(100, 80, 5);
  r2.first_lost = 50;  // rank 2 saw an error: compare below call 50 only
  ASSERT_EQ(write_rank_table(dir, r1), "");
  RankTable back;
  ASSERT_EQ(read_rank_table(hash_file_path(dir, 1, 1), &back), "");
  EXPECT_EQ(back.rank, 1);
  EXPECT_EQ(back.issued, 80u);
  EXPECT_EQ(back.table.size(), 100u);
  EXPECT_EQ(back.table[7].hash, r1.table[7].hash);
  std::thread late([&] {  // a peer that finishes later
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(write_rank_table(dir, r2), "");
  });
  const CrossRankResult r = exchange_and_compare(dir, mine, 30);
  late.join();
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.compared, 50u);
  EXPECT_EQ(r.first_slot, 7);
  EXPECT_EQ(r.first_rank, 2);
  EXPECT_FALSE(std::filesystem::exists(hash_file_path(dir, 1, 1)));  // consumed
  const CrossRankResult missing = exchange_and_compare(dir, mine, 0.1);
  EXPECT_NE(missing.error.find("did not appear"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(StressVerdict, WrongBelowTheFirstLostCall) {
  std::vector<TableEntry> t(10, TableEntry{});
  t[2].wrong = 3;
  t[8].wrong = 100;
  EXPECT_EQ(wrong_below(t, 10, UINT64_MAX), 103u);
  EXPECT_EQ(wrong_below(t, 10, 5), 3u);
  EXPECT_EQ(wrong_below(t, 25, 15), 0u);  // folded: slot 2 holds call 22 >= 15
}

TEST(StressVerdict, ExitCodes) {
  StressOptions o;
  RunReport clean;
  clean.repeats.push_back(RepeatReport{});
  clean.repeats[0].ranks.push_back(RankReport{});
  EXPECT_EQ(exit_code(o, clean), kStressOk);
  RunReport wrong = clean;
  wrong.repeats[0].ranks[0].wrong = 5;
  wrong.repeats[0].ranks[0].wrong_before_loss = 5;
  EXPECT_EQ(exit_code(o, wrong), kStressWrong);
  RunReport timeout = clean;
  timeout.repeats[0].ranks[0].failure = Failure::kAsync;
  timeout.repeats[0].ranks[0].wrong = 9;  // garbage after the loss: still a timeout, not "wrong"
  EXPECT_EQ(exit_code(o, timeout), kStressTimeout);
  RunReport mismatch = clean;
  mismatch.repeats[0].cross.mismatched = 1;
  EXPECT_EQ(exit_code(o, mismatch), kStressWrong);
  RunReport refused = clean;
  refused.repeats[0].ranks[0].failure = Failure::kRefused;
  EXPECT_EQ(exit_code(o, refused), kStressSetup);
  RunReport setup;
  setup.setup_error = "no";
  EXPECT_EQ(exit_code(o, setup), kStressSetup);
  o.expect_failure = true;
  EXPECT_EQ(exit_code(o, clean), kStressWrong);
  EXPECT_EQ(exit_code(o, wrong), kStressOk);
  EXPECT_EQ(exit_code(o, timeout), kStressOk);
  EXPECT_EQ(exit_code(o, mismatch), kStressOk);
  EXPECT_EQ(exit_code(o, setup), kStressSetup);
  RunReport garbage_only = clean;  // wrong elements, all in calls a peer declared lost
  garbage_only.repeats[0].ranks[0].wrong = 3;
  EXPECT_EQ(exit_code(o, garbage_only), kStressOk);  // a negative control counts any wrong element
  o.expect_failure = false;
  EXPECT_EQ(exit_code(o, garbage_only), kStressOk);  // not silent corruption by itself
  o.expect_failure = true;
  RunReport two = clean;  // a failure in any repeat counts
  two.repeats.push_back(timeout.repeats[0]);
  o.expect_failure = false;
  EXPECT_EQ(exit_code(o, two), kStressTimeout);
  EXPECT_NE(repeat_line(two.repeats[1]).find("async_error"), std::string::npos);
  EXPECT_NE(repeat_line(clean.repeats[0]).find("clean"), std::string::npos);
}

}  // namespace
}  // namespace arf::stress
