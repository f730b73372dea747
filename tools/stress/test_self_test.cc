#include "self_test.h"

#include <gtest/gtest.h>

namespace arf::stress {
namespace {

TEST(StressSelfTest, EveryNthCallOnRankCallModWorldCyclingOutputs) {
  EXPECT_FALSE(corruption_of(5, 0, 4).injected);
  int outputs[kCorruptOutputs] = {0, 0, 0, 0};
  uint64_t injected = 0;
  for (uint64_t call = 0; call < 400; ++call) {
    const Corruption c = corruption_of(call, 10, 4);
    EXPECT_EQ(c.injected, call % 10 == 9) << call;
    if (!c.injected) continue;
    ++injected;
    EXPECT_EQ(c.rank, call % 4);
    ++outputs[c.output];
  }
  EXPECT_EQ(injected, 40u);
  for (int o = 0; o < kCorruptOutputs; ++o) EXPECT_EQ(outputs[o], 10) << o;
}

std::vector<std::vector<TableEntry>> clean_tables(size_t ranks, size_t calls) {
  return std::vector<std::vector<TableEntry>>(ranks, std::vector<TableEntry>(calls, TableEntry{0, 0, 0}));
}

TEST(StressSelfTest, VerdictNeedsEveryCorruptionCaughtAndNothingElse) {
  const std::vector<int> ranks = {0, 1};
  auto tables = clean_tables(2, 40);
  for (uint64_t call = 0; call < 40; ++call) {
    const Corruption c = corruption_of(call, 5, 2);
    if (c.injected) tables[c.rank][call].wrong = 1;
  }
  SelfTestVerdict v = self_test_verdict(tables, ranks, 40, 5, 2);
  EXPECT_EQ(v.injected, 8u);
  EXPECT_EQ(v.caught, 8u);
  EXPECT_TRUE(v.ok()) << v.text();

  tables[1][9].wrong = 0;  // call 9: corrupted on rank 1, not flagged
  v = self_test_verdict(tables, ranks, 40, 5, 2);
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.first_missed, 9u);

  tables[1][9].wrong = 1;
  tables[0][9].wrong = 2;  // flagged on a rank that corrupted nothing
  tables[1][3].wrong = 1;  // and on a call nobody corrupted
  v = self_test_verdict(tables, ranks, 40, 5, 2);
  EXPECT_EQ(v.false_alarms, 2u);
  EXPECT_EQ(v.first_false_alarm, 3u);
  EXPECT_FALSE(v.ok());

  EXPECT_FALSE(self_test_verdict(clean_tables(2, 3), ranks, 3, 5, 2).ok());  // nothing injected
}

}  // namespace
}  // namespace arf::stress
