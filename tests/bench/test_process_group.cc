// The multi-process tools' host channel (tools/common/process_group.h) with forked processes, as
// arfusion-run starts them: the environment names rank, world and job id; every process gathers
// every rank's blob (of different lengths), votes, and learns of a peer that exits.
#include <gtest/gtest.h>
#include <cstdlib>
#include <string>
#include <vector>

#include "fork_ranks.h"
#include "process_group.h"

namespace arf::bench {
namespace {

TEST(ProcessGroup, NotUnderALauncherIsNoGroupAndNoError) {
  unsetenv("ARF_RENDEZVOUS_ID");
  std::string why = "unset";
  EXPECT_EQ(ProcessGroup::from_env(5, &why), nullptr);
  EXPECT_TRUE(why.empty()) << why;
}

TEST(ProcessGroup, EveryProcessGathersEveryRanksBlobAndVotes) {
  constexpr int kWorld = 3;
  const std::vector<int> codes = testing::fork_ranks(kWorld, [](int rank) {
    std::string why;
    const auto group = ProcessGroup::from_env(20, &why);
    if (group == nullptr || group->rank() != rank || group->world() != kWorld) return 10;
    // Different lengths per rank, one of them empty.
    const std::vector<std::string> all = group->all_gather(std::string(rank * 5, char('a' + rank)));
    for (int r = 0; r < kWorld; ++r) {
      if (all[r] != std::string(r * 5, char('a' + r))) return 11;
    }
    if (!group->vote(true)) return 12;
    if (group->vote(rank != 1)) return 13;  // one no makes everyone's answer no
    group->barrier();
    return group->error().empty() ? 0 : 14;
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(ProcessGroup, APeerThatExitsFailsTheOthersQuicklyWithAReason) {
  const std::vector<int> codes = testing::fork_ranks(2, [](int rank) {
    std::string why;
    const auto group = ProcessGroup::from_env(20, &why);
    if (group == nullptr) return 10;
    if (rank == 1) return 0;  // leaves without taking part in the vote
    const bool yes = group->vote(true);
    return !yes && !group->error().empty() ? 0 : 11;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST(ProcessGroup, AMalformedIdIsAnErrorNotASilentSingleRank) {
  setenv("ARF_RENDEZVOUS_ID", "not-hex", 1);
  setenv("ARF_RANK", "0", 1);
  setenv("ARF_WORLD_SIZE", "2", 1);
  std::string why;
  EXPECT_EQ(ProcessGroup::from_env(1, &why), nullptr);
  EXPECT_NE(why.find("ARF_RENDEZVOUS_ID"), std::string::npos) << why;
  unsetenv("ARF_RENDEZVOUS_ID");
  unsetenv("ARF_RANK");
  unsetenv("ARF_WORLD_SIZE");
}

}  // namespace
}  // namespace arf::bench
