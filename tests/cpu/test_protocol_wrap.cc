// Every epoch and call-index comparison of the protocol (src/common/protocol_index.h, the
// arithmetic protocol.cuh's waits use) across the 32-bit wrap, which a deployment reaches in days
// (2^32 calls at 10^4 calls/s is about 5 days; a CTA's barrier epoch, two per call, in half that).
// The Spin model (tests/protocol_model) takes this arithmetic as given; ARF_DEBUG_COUNTERS_NEAR_WRAP
// starts a communicator at the wrap on the GPU (arfusion.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "common/protocol_index.h"

namespace arf::protocol {
namespace {

constexpr uint32_t kMax = 0xFFFFFFFFu;

TEST(ProtocolWrap, EpochReachedAroundTheWrap) {
  for (const uint32_t want : {kMax - 2, kMax - 1, kMax, 0u, 1u, 2u}) {
    for (uint32_t ahead = 0; ahead < 4; ++ahead) {
      EXPECT_TRUE(epoch_reached(want + ahead, want)) << want << " + " << ahead;
    }
    for (uint32_t behind = 1; behind < 4; ++behind) {
      EXPECT_FALSE(epoch_reached(want - behind, want)) << want << " - " << behind;
    }
  }
  // The window: a flag up to 2^31 - 1 ahead counts as reached, one 2^31 or more behind does not
  // (a peer is at most one barrier ahead, so the window is never approached).
  EXPECT_TRUE(epoch_reached(5u + 0x7FFFFFFFu, 5u));
  EXPECT_FALSE(epoch_reached(5u + 0x80000000u, 5u));
  // Flags start at the counters' starting epoch: the first barrier waits for start + 1.
  for (const uint32_t start : {0u, kMax - 40, kMax, 0x80000000u}) {
    EXPECT_FALSE(epoch_reached(start, start + 1)) << start;
    EXPECT_TRUE(epoch_reached(start + 1, start + 1)) << start;
  }
}

TEST(ProtocolWrap, FlagWordsKeepEpochAndCallApartAtTheirExtremes) {
  for (const uint32_t epoch : {0u, 1u, kMax - 1, kMax}) {
    for (const uint32_t call : {0u, 1u, kMax - 1, kMax}) {
      const uint64_t w = flag_word(epoch, call);
      EXPECT_EQ(flag_epoch(w), epoch);
      EXPECT_EQ(flag_call(w), call);
    }
  }
}

// My wait for `want` in call `mine` may end on the peer's flag of the same barrier (want, mine) or
// of its next barrier (want + 1), in this call or the first barrier of the next one (mine + 1),
// whatever side of the wrap either counter is on. Anything else is a protocol slip.
TEST(ProtocolWrap, BarrierCallConsistencyAcrossTheWrap) {
  for (const uint32_t want : {kMax - 1, kMax, 0u, 1u}) {
    for (const uint32_t mine : {kMax - 1, kMax, 0u, 1u}) {
      EXPECT_TRUE(barrier_call_consistent(flag_word(want, mine), want, mine));
      EXPECT_TRUE(barrier_call_consistent(flag_word(want + 1, mine), want, mine));
      EXPECT_TRUE(barrier_call_consistent(flag_word(want + 1, mine + 1), want, mine));
      // Same epoch, another call: the peer's CTA of another call met mine.
      EXPECT_FALSE(barrier_call_consistent(flag_word(want, mine + 1), want, mine));
      EXPECT_FALSE(barrier_call_consistent(flag_word(want, mine - 1), want, mine));
      // One barrier ahead but two calls ahead, or a call behind.
      EXPECT_FALSE(barrier_call_consistent(flag_word(want + 1, mine + 2), want, mine));
      EXPECT_FALSE(barrier_call_consistent(flag_word(want + 1, mine - 1), want, mine));
      // Two barriers ahead: never possible (passing a barrier needs my flag).
      EXPECT_FALSE(barrier_call_consistent(flag_word(want + 2, mine), want, mine));
      EXPECT_FALSE(barrier_call_consistent(flag_word(want + 2, mine + 1), want, mine));
    }
  }
  // The 64-bit call index travels as its low 32 bits: call 2^32 + 3 is 3 on the wire, and the
  // next call after 2^32 - 1 is 0.
  const uint64_t call = (uint64_t{1} << 32) + 3;
  EXPECT_TRUE(barrier_call_consistent(flag_word(9, static_cast<uint32_t>(call)), 9,
                                      static_cast<uint32_t>(call)));
  EXPECT_TRUE(barrier_call_consistent(flag_word(10, 0u), 9, kMax));
}

// The Lamport rotation stores the buffer index, never a count: a 32-bit count taken modulo 3
// repeats a buffer at the wrap (2^32 is not a multiple of 3), the rotation never does.
TEST(ProtocolWrap, LamportRotationHasNoCounterToWrap) {
  EXPECT_EQ(static_cast<uint32_t>(kMax) % 3, static_cast<uint32_t>(kMax + 1u) % 3)
      << "the hazard the stored index avoids";
  uint32_t b = 0;
  for (int call = 0; call < 12; ++call) {
    const uint32_t next = lamport_next_buffer(b);
    EXPECT_NE(next, b);
    EXPECT_NE(lamport_clear_buffer(b), next);
    b = next;
  }
}

}  // namespace
}  // namespace arf::protocol
