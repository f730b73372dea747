// compare_step_hashes (cross_process.h) between real forked processes: what every rank receives
// when all agree, when one rank differs at some steps (also past one exchange chunk), when ranks
// verified different numbers of steps, and when a peer leaves.
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "cross_process.h"
#include "fork_ranks.h"
#include "process_group.h"

namespace arf::stress {
namespace {

// Step hashes of rank `rank`: a fixed pattern, unverified at every 7th step, and different from
// the others' at `bad_steps` when rank == bad_rank.
std::vector<uint64_t> hashes_of(int rank, size_t steps, int bad_rank,
                                std::vector<size_t> bad_steps) {
  std::vector<uint64_t> h(steps);
  for (size_t s = 0; s < steps; ++s) h[s] = s % 7 == 3 ? kNoStepHash : 1000 + s;
  if (rank == bad_rank) {
    for (size_t s : bad_steps) h[s] += 1;
  }
  return h;
}

// Runs the exchange in `world` processes with hashes_for(rank)'s hashes (nullopt: that rank exits
// without exchanging); each child checks the result it got (exit 0 = as expected).
template <typename Hashes, typename Expect>
std::vector<int> exchange(int world, Hashes hashes_for, Expect expect) {
  return testing::fork_ranks(world, [&](int rank) {
    std::string why;
    const auto group = ProcessGroup::from_env(30, &why);
    if (group == nullptr) return 10;
    const std::optional<std::vector<uint64_t>> mine = hashes_for(rank);
    if (!mine) return 0;
    return expect(compare_step_hashes(*group, *mine)) ? 0 : 11;
  });
}

// The same pattern on every rank, rank bad_rank differing at bad_steps.
auto pattern(size_t steps, int bad_rank = -1, std::vector<size_t> bad_steps = {}) {
  return [=](int rank) -> std::optional<std::vector<uint64_t>> {
    return hashes_of(rank, steps, bad_rank, bad_steps);
  };
}

uint64_t verified_steps(size_t steps) {
  uint64_t n = 0;
  for (size_t s = 0; s < steps; ++s) n += s % 7 != 3;
  return n;
}

TEST(CrossProcess, IdenticalHashesCompareEveryVerifiedStep) {
  const auto codes = exchange(3, pattern(1000), [](const CrossProcessResult& x) {
    return x.error.empty() && x.steps_compared == verified_steps(1000) && x.mismatched_steps == 0 &&
           x.first_step == -1;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
}

TEST(CrossProcess, ARankThatDiffersIsFoundAtItsFirstStepOnEveryRank) {
  // Step 3 is unverified (not compared); past 65536 the second exchange chunk is needed.
  const auto codes =
      exchange(3, pattern(150000, 2, {3, 5, 9, 140000}), [](const CrossProcessResult& x) {
        return x.error.empty() && x.mismatched_steps == 3 && x.first_step == 5 && x.first_rank == 2;
      });
  for (int code : codes) EXPECT_EQ(code, 0);
}

TEST(CrossProcess, ASilentMismatchCannotHideBehindRankZero) {
  // Negative control of the comparison itself: rank 1 differs at step 0 only.
  const auto codes = exchange(2, pattern(10, 1, {0}), [](const CrossProcessResult& x) {
    return x.mismatched_steps == 1 && x.first_step == 0 && x.first_rank == 1;
  });
  for (int code : codes) EXPECT_EQ(code, 0);
}

TEST(CrossProcess, RanksThatVerifiedDifferentCountsCompareTheCommonSteps) {
  const auto lengths = [](int rank) -> std::optional<std::vector<uint64_t>> {
    return hashes_of(rank, rank == 0 ? 100 : 70, -1, {});
  };
  const auto codes = exchange(2, lengths, [](const CrossProcessResult& x) {
    return x.error.empty() && x.steps_compared == verified_steps(70);
  });
  for (int code : codes) EXPECT_EQ(code, 0);
}

TEST(CrossProcess, APeerThatLeavesIsAnErrorNotAPass) {
  const auto rank1_leaves = [](int rank) -> std::optional<std::vector<uint64_t>> {
    if (rank == 1) return std::nullopt;
    return hashes_of(rank, 100, -1, {});
  };
  const auto codes = exchange(2, rank1_leaves, [](const CrossProcessResult& x) {
    return !x.error.empty() && x.steps_compared == 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace arf::stress
