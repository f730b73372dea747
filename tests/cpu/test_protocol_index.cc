// The protocol's index arithmetic (src/common/protocol_index.h): the rotation, the epoch comparison
// across the 32-bit wrap, disjoint 64-bit slot offsets, flag indices and twoshot parts. The protocol
// these serve is model-checked by Spin (tests/protocol_model, with the rotation and rules these
// functions compute); the properties below are what the model takes as given about the indices.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "common/protocol_index.h"

namespace arf::protocol {
namespace {

TEST(ProtocolIndex, LamportRotationVisitsAllThreeBuffersAndClearsThePreviousOne) {
  uint32_t b = 0;
  std::set<uint32_t> seen;
  for (int call = 0; call < 9; ++call) {
    seen.insert(b);
    const uint32_t next = lamport_next_buffer(b);
    EXPECT_NE(next, b);
    EXPECT_EQ(lamport_clear_buffer(next), b) << "call k+1 must clear the buffer call k read";
    EXPECT_NE(lamport_clear_buffer(b), b);
    EXPECT_NE(lamport_clear_buffer(b), next) << "the buffer a peer one call ahead writes is never cleared";
    b = next;
  }
  EXPECT_EQ(seen.size(), 3u);
}

TEST(ProtocolIndex, EpochComparisonSurvivesWrap) {
  EXPECT_TRUE(epoch_reached(5, 5));
  EXPECT_TRUE(epoch_reached(6, 5));
  EXPECT_FALSE(epoch_reached(4, 5));
  EXPECT_TRUE(epoch_reached(0u, 0xffffffffu)) << "0 follows 2^32-1";
  EXPECT_TRUE(epoch_reached(1u, 0xffffffffu));
  EXPECT_FALSE(epoch_reached(0xffffffffu, 0u));
}

TEST(ProtocolIndex, LamportOffsetsAre64BitAndDisjoint) {
  const int64_t slot = int64_t{1} << 28;  // 2^28 elements: 32-bit offsets would overflow
  EXPECT_EQ(lamport_slot_offset(2, 7, 8, slot), (2 * 8 + 7) * slot);
  EXPECT_GT(lamport_slot_offset(2, 7, 8, slot), int64_t{1} << 32);
  for (int world : {2, 4, 8}) {
    std::set<int64_t> starts;
    for (uint32_t b = 0; b < 3; ++b)
      for (int r = 0; r < world; ++r) starts.insert(lamport_slot_offset(b, r, world, 1000));
    EXPECT_EQ(starts.size(), static_cast<size_t>(3 * world));
  }
}

TEST(ProtocolIndex, FlagIndexIsUniquePerCtaAndSource) {
  std::set<int> seen;
  for (int cta = 0; cta < kMaxCtas; ++cta)
    for (int src = 0; src < kMaxRanks; ++src) seen.insert(flag_index(cta, src));
  EXPECT_EQ(seen.size(), static_cast<size_t>(kMaxCtas * kMaxRanks));
  EXPECT_EQ(*seen.rbegin(), kMaxCtas * kMaxRanks - 1);
}

TEST(ProtocolIndex, TwoshotPartsCoverEveryVectorOnce) {
  for (int world : {1, 2, 4, 8}) {
    for (int row_vecs : {1, 2, 3, 7, 256, 360, 640, 896, 1024, 2048}) {
      const int part = twoshot_part_vecs(row_vecs, world);
      std::vector<int> owner_count(world, 0);
      std::set<int64_t> offsets;
      for (int v = 0; v < row_vecs; ++v) {
        const int owner = twoshot_owner(v, part);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, world) << "row_vecs " << row_vecs << " world " << world;
        ++owner_count[owner];
        offsets.insert(twoshot_scatter_offset(3, v - owner * part, part) + owner * 1'000'000);
      }
      EXPECT_EQ(offsets.size(), static_cast<size_t>(row_vecs));
      for (int o = 0; o < world; ++o) EXPECT_LE(owner_count[o], part);
    }
  }
}

}  // namespace
}  // namespace arf::protocol
