#include "segment_times.h"

#include <gtest/gtest.h>

namespace arf::stress {
namespace {

TEST(SegmentTimes, MeansPerPatternAndOverAll) {
  SegmentTable t;
  record_segments(&t, "fp8_group", {1.0f, 2.0f, 0.5f, 4.5f});
  record_segments(&t, "fp8_group", {3.0f, 2.0f, 0.5f, 2.5f});
  record_segments(&t, "allreduce", {0.5f, 1.0f, 0.25f, 0.25f});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t["all"].calls, 3u);
  EXPECT_DOUBLE_EQ(t["all"].ms[kSegCheck], 7.25);
  EXPECT_EQ(t["fp8_group"].calls, 2u);
  EXPECT_DOUBLE_EQ(t["fp8_group"].ms[kSegGenerate], 4.0);

  SegmentTable other;
  record_segments(&other, "allreduce", {0.5f, 1.0f, 0.25f, 0.25f});
  t["allreduce"].merge(other["allreduce"]);
  EXPECT_EQ(t["allreduce"].calls, 2u);
  EXPECT_DOUBLE_EQ(t["allreduce"].ms[kSegCall], 2.0);

  const std::vector<std::string> lines = segment_lines(t);
  ASSERT_EQ(lines.size(), 4u);  // header + allreduce, all, fp8_group (map order)
  // fp8_group: per call generate 2000 us, call 2000, overwrite 500, check 3500 of 8000 us busy.
  EXPECT_NE(lines[3].find("fp8_group"), std::string::npos);
  EXPECT_NE(lines[3].find("2000.0 ( 25)"), std::string::npos) << lines[3];
  EXPECT_NE(lines[3].find("3500.0 ( 44)"), std::string::npos) << lines[3];
}

TEST(SegmentTimes, EmptyTableHasOnlyTheHeader) {
  EXPECT_EQ(segment_lines({}).size(), 1u);
}

}  // namespace
}  // namespace arf::stress
