// CallSignatureLog (src/transport/call_signature.h): the same calls on every rank pass, in any
// arrival order and from concurrent threads; a different shape or a skipped call is reported with
// both ranks' signatures.
#include "transport/call_signature.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace arf::local {
namespace {

CallSignature shape(int64_t tokens, int64_t hidden = 4096) {
  CallSignature s;
  s.pattern = 1;
  s.num_elems = tokens * hidden;
  s.row_elems = hidden;
  return s;
}

TEST(CallSignatureLog, SameCallsOnEveryRankPass) {
  CallSignatureLog log;
  for (uint64_t call = 0; call < 100; ++call) {
    for (int rank : {2, 0, 3, 1}) EXPECT_TRUE(log.record(rank, call, shape(1 + call % 7)).is_ok());
  }
}

TEST(CallSignatureLog, DifferentTokenCountIsReportedWithBothRanks) {
  CallSignatureLog log;
  ASSERT_TRUE(log.record(0, 0, shape(16)).is_ok());
  const Status s = log.record(1, 0, shape(17));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("call 0: rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rank 0 issued"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::to_string(17 * 4096)), std::string::npos) << s.message();
}

// A sandwich call (post_gamma) on one rank and a plain one on another: same shape, reported.
TEST(CallSignatureLog, SandwichOnOneRankOnlyIsReported) {
  CallSignatureLog log;
  CallSignature sandwich = shape(16);
  sandwich.post_norm = 1;
  ASSERT_TRUE(log.record(0, 0, sandwich).is_ok());
  ASSERT_TRUE(log.record(1, 0, sandwich).is_ok());
  const Status s = log.record(2, 0, shape(16));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("sandwich"), std::string::npos) << s.message();
}

TEST(CallSignatureLog, SkippedCallShiftsTheSequenceAndIsReported) {
  CallSignatureLog log;
  // Rank 0 issues A, B; rank 1 skips A and issues B as its call 0.
  ASSERT_TRUE(log.record(0, 0, shape(1)).is_ok());
  ASSERT_TRUE(log.record(0, 1, shape(2)).is_ok());
  EXPECT_FALSE(log.record(1, 0, shape(2)).is_ok());
}

TEST(CallSignatureLog, LappedRankIsNotComparedAndNotFlagged) {
  CallSignatureLog log(/*window=*/4);
  for (uint64_t call = 0; call < 10; ++call) ASSERT_TRUE(log.record(0, call, shape(call + 1)).is_ok());
  EXPECT_TRUE(log.record(1, 2, shape(999)).is_ok()) << "slot now holds call 6: nothing to compare";
  EXPECT_FALSE(log.record(1, 9, shape(999)).is_ok());
}

TEST(CallSignatureLog, ConcurrentRanksAgree) {
  CallSignatureLog log(64);
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.emplace_back([&, r] {
      for (uint64_t call = 0; call < 5000; ++call) {
        if (!log.record(r, call, shape(1 + call % 13)).is_ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace arf::local
