// Policy decisions on topology fixtures, dispatch boundaries, forced algorithms, launch shapes and
// the rank-symmetry / determinism invariants (every rank must plan a call identically, or the ranks
// run different kernels and wait for each other until the bound), plus the cross-check that every
// plan the policy calls feasible fits in the workspace that workspace_layout sizes.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "common/launch_plan.h"
#include "cpu/plan_test_util.h"
#include "policy/policy.h"
#include "transport/workspace.h"

namespace arf {
namespace {

StaticFacts facts_for(int world, int ranks_per_device = 1, int64_t max_tokens = 1024,
                      int64_t max_hidden = 8192, int64_t oneshot_max_tokens = 0) {
  StaticFacts f;
  f.world = world;
  f.dtype = DType::kBf16;
  f.max_tokens = max_tokens;
  f.max_hidden = max_hidden;
  f.oneshot_max_tokens = oneshot_max_tokens ? oneshot_max_tokens : max_tokens;
  f.min_sm_count = 132;  // H100 SXM / H200
  f.max_ranks_per_device = ranks_per_device;
  return f;
}

CallShape fused(int64_t tokens, int hidden, Algorithm requested = Algorithm::kAuto,
                Pattern pattern = Pattern::kResidualRmsNorm) {
  return call_shape(tokens, hidden, pattern, requested);
}

TEST(BlockThreads, HiddenSizesOfRealModels) {
  EXPECT_EQ(block_threads_for_row(2048), 256);
  EXPECT_EQ(block_threads_for_row(2880), 384);  // 360 vectors, rounded up to whole warps
  EXPECT_EQ(block_threads_for_row(4096), 512);
  EXPECT_EQ(block_threads_for_row(5120), 512);  // 640 vectors: 2 per thread for some
  EXPECT_EQ(block_threads_for_row(7168), 512);
  EXPECT_EQ(block_threads_for_row(8192), 512);    // the widest row of the 512-thread block
  EXPECT_EQ(block_threads_for_row(8200), 544);    // 1025 vectors: 513 threads' worth, whole warps
  EXPECT_EQ(block_threads_for_row(12288), 768);   // 1536 vectors, 2 each
  EXPECT_EQ(block_threads_for_row(16384), 1024);  // exactly kMaxVecsPerThread per thread
}

// Every row gets a block of whole warps within kMaxBlockThreads that covers it with at most
// kMaxVecsPerThread vectors a thread, and no wider block than it needs: up to 8192 columns at most
// 512 threads; past it the fewest warps that hold the row at 2 vectors a thread.
TEST(BlockThreads, EveryRowCoveredByTheNarrowestBlock) {
  for (int row = 1; row <= kMaxHidden; ++row) {
    const int block = block_threads_for_row(row);
    const int vecs = (row + kElemsPerVec - 1) / kElemsPerVec;
    ASSERT_GT(block, 0) << row;
    ASSERT_EQ(block % 32, 0) << row;
    ASSERT_LE(block, kMaxBlockThreads) << row;
    ASSERT_LE(vecs, block * kMaxVecsPerThread) << row;
    if (row <= 8192) {
      ASSERT_LE(block, kNarrowBlockThreads) << row;
      ASSERT_EQ(block, std::min(kNarrowBlockThreads, (vecs + 31) / 32 * 32)) << row;
    } else {
      ASSERT_GT(vecs, (block - 32) * kMaxVecsPerThread) << row;  // a warp fewer would not hold it
    }
  }
}

TEST(BlockThreads, EdgesAndInfeasible) {
  EXPECT_EQ(block_threads_for_row(8), 32);
  EXPECT_EQ(block_threads_for_row(264), 64);
  EXPECT_EQ(block_threads_for_row(kMaxHidden + 8), 0);
  EXPECT_EQ(block_threads_for_row(0), 0);
  EXPECT_EQ(block_threads_for_row(-8), 0);
}

TEST(GridCap, CoResidencyAcrossVirtualRanks) {
  EXPECT_EQ(co_resident_grid_cap(facts_for(8, 1), 512), 264);
  EXPECT_EQ(co_resident_grid_cap(facts_for(8, 8), 512), 33);
  EXPECT_EQ(co_resident_grid_cap(facts_for(4, 4), 512), 66);
  EXPECT_EQ(co_resident_grid_cap(facts_for(4, 4), 32), 66);  // two per SM, however small the block
  StaticFacts tiny = facts_for(8, 8);
  tiny.min_sm_count = 1;  // 2 / 8 rounds to 0: still one CTA
  EXPECT_EQ(co_resident_grid_cap(tiny, 512), 1);
  StaticFacts huge = facts_for(2, 1);
  huge.min_sm_count = 1000;
  EXPECT_EQ(co_resident_grid_cap(huge, 512), kMaxCtas);
}

// Blocks wider than 512 threads (rows past 8192 columns) keep one CTA per SM resident, not two.
TEST(GridCap, WideBlocksHalveTheCoResidentGrid) {
  EXPECT_EQ(co_resident_grid_cap(facts_for(8, 1), 544), 132);
  EXPECT_EQ(co_resident_grid_cap(facts_for(8, 8), 1024), 16);
  EXPECT_EQ(co_resident_grid_cap(facts_for(2, 2), 768), 66);
  EXPECT_EQ(protocol_free_grid_cap(facts_for(1, 1), 1024), 132);
  EXPECT_EQ(protocol_free_grid_cap(facts_for(1, 1), 544), 132);
  EXPECT_EQ(protocol_free_grid_cap(facts_for(1, 1), 512), 264);
  const StaticFacts f = facts_for(8, 8, 16384, 16384);
  for (int hidden : {8200, 12288, 16384}) {
    const Plan p = plan_ok(fused(4096, hidden, Algorithm::kTwoshot), f);
    EXPECT_EQ(p.grid, 16) << hidden;  // 132 SMs / 8 ranks, rounded down
    EXPECT_GT(p.block, kNarrowBlockThreads) << hidden;
  }
  EXPECT_EQ(plan_ok(fused(4096, 8192, Algorithm::kTwoshot), f).grid, 33);  // 512 threads: 2 per SM
}

TEST(Auto, WorldOneIsEpilogueOnly) {
  const Plan p = plan_ok(fused(1000, 8192), facts_for(1));
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport);
  EXPECT_EQ(p.reason, "world 1: epilogue only, no communication");
  EXPECT_FALSE(p.forced);
}

TEST(Auto, ReasonNamesSizeAndLimit) {
  const Plan p = plan_ok(fused(1, 8192), facts_for(8));
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport);
  EXPECT_EQ(p.reason, "auto: 16 KiB/rank <= 512 KiB at world 8 -> oneshot_lamport");
}

struct Boundary {
  int world;
  int64_t last_oneshot_tokens;  // at hidden 8192 bf16 (16 KiB per token)
};

// Without it gtest prints the struct's bytes, padding included (different in every build).
void PrintTo(const Boundary& b, std::ostream* os) {
  *os << "world " << b.world << ", last one-shot tokens " << b.last_oneshot_tokens;
}

class AutoBoundary : public ::testing::TestWithParam<Boundary> {};

// Above the limit: two-shot, except at world 2 where it reads as much as oneshot_pull (the default
// tuning table).
TEST_P(AutoBoundary, OneshotUpToLimitTwoshotAbove) {
  const auto [world, tokens] = GetParam();
  const Algorithm above_limit = world == 2 ? Algorithm::kOneshotPull : Algorithm::kTwoshot;
  {
    const StaticFacts f = facts_for(world, 1);  // one rank per GPU
    const Plan at = plan_ok(fused(tokens, 8192), f);
    EXPECT_EQ(at.algorithm, Algorithm::kOneshotLamport) << at.reason;
    const Plan above = plan_ok(fused(tokens + 1, 8192), f);
    EXPECT_EQ(above.algorithm, above_limit) << above.reason;
    EXPECT_NE(above.reason.find("> "), std::string::npos) << above.reason;
    // The same limit in elements, one vector each side, as a flat all-reduce.
    const int64_t limit_elems = tokens * 8192;
    CallShape flat = fused(1, 8192, Algorithm::kAuto, Pattern::kAllReduce);
    flat.num_elems = limit_elems;
    flat.num_rows = tokens;
    EXPECT_EQ(plan_ok(flat, f).algorithm, Algorithm::kOneshotLamport);
    flat.num_elems = limit_elems + 8;
    flat.num_rows = tokens + 1;
    EXPECT_EQ(plan_ok(flat, f).algorithm, above_limit);
  }
}

// Ranks sharing a GPU where only some do (unmeasured): two-shot at every size it can run, with the
// reason (policy.cc, choose_auto).
TEST(Auto, PartlySharedDeviceTakesTwoshot) {
  for (const auto [world, tokens] : {Boundary{4, 16}, Boundary{8, 32}}) {
    const StaticFacts f = facts_for(world, 2);
    for (int64_t t : {int64_t{1}, tokens, tokens + 1, int64_t{1000}}) {
      for (Pattern pattern : {Pattern::kResidualRmsNorm, Pattern::kAllReduce}) {
        const Plan p = plan_ok(fused(t, 8192, Algorithm::kAuto, pattern), f);
        EXPECT_EQ(p.algorithm, Algorithm::kTwoshot) << p.reason;
        EXPECT_NE(p.reason.find("share a device"), std::string::npos) << p.reason;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Hopper, AutoBoundary,
                         ::testing::Values(Boundary{2, 512}, Boundary{4, 16}, Boundary{8, 32}),
                         [](const auto& info) { return "ws" + std::to_string(info.param.world); });

// Every rank on one GPU: the measured rule (the default tuning table's "shared" entries), at each
// side of its limits, fused (hidden 8192: one token is 16 KiB) and as a flat all-reduce of the same
// bytes.
struct SharedCase {
  int world;
  Pattern pattern;
  int64_t last_lamport_tokens;  // 0: never oneshot_lamport
  Algorithm above;
  int64_t last_above_tokens = 0;  // > 0: `above` up to here, then `beyond`
  Algorithm beyond = Algorithm::kAuto;
};

class AllOnOneDevice : public ::testing::TestWithParam<SharedCase> {};

TEST_P(AllOnOneDevice, MeasuredRule) {
  const SharedCase c = GetParam();
  const StaticFacts f = facts_for(c.world, c.world, /*max_tokens=*/2048);
  auto plan_at = [&](int64_t tokens) {
    CallShape s = fused(tokens, 8192, Algorithm::kAuto, c.pattern);
    const Plan p = plan_ok(s, f);
    EXPECT_NE(p.reason.find("share a device"), std::string::npos) << p.reason;
    EXPECT_TRUE(p.shared_device_gate);
    return p;
  };
  if (c.last_lamport_tokens > 0) {
    for (int64_t t : {int64_t{1}, c.last_lamport_tokens}) {
      const Plan p = plan_at(t);
      EXPECT_EQ(p.algorithm, Algorithm::kOneshotLamport) << t << " tokens: " << p.reason;
    }
  }
  const int64_t last_above = c.last_above_tokens > 0 ? c.last_above_tokens : 2048;
  for (int64_t t : {c.last_lamport_tokens + 1, last_above}) {
    const Plan p = plan_at(t);
    EXPECT_EQ(p.algorithm, c.above) << t << " tokens: " << p.reason;
    if (c.last_lamport_tokens > 0) EXPECT_NE(p.reason.find("/rank > "), std::string::npos) << p.reason;
  }
  if (c.last_above_tokens > 0) {
    for (int64_t t : {c.last_above_tokens + 1, int64_t{2048}}) {
      const Plan p = plan_at(t);
      EXPECT_EQ(p.algorithm, c.beyond) << t << " tokens: " << p.reason;
      EXPECT_NE(p.reason.find("/rank > " + std::to_string(c.last_above_tokens / 64) + " MiB at world"),
                std::string::npos)
          << p.reason;
    }
  }
}

// A Lamport slot too small for the call: the rule's size limit does not matter, and the reason says why.
TEST(AllOnOneDevice, LamportInfeasibleBelowTheLimit) {
  const StaticFacts f = facts_for(2, 2, 1024, 8192, /*oneshot_max_tokens=*/16);
  const Plan p = plan_ok(fused(17, 8192), f);  // 272 KiB, under the 2 MiB limit
  EXPECT_EQ(p.algorithm, Algorithm::kOneshotPull) << p.reason;
  EXPECT_NE(p.reason.find("oneshot_lamport infeasible"), std::string::npos) << p.reason;
}

INSTANTIATE_TEST_SUITE_P(
    OneH200, AllOnOneDevice,
    ::testing::Values(SharedCase{2, Pattern::kResidualRmsNorm, 128, Algorithm::kOneshotPull},
                      SharedCase{2, Pattern::kAllReduce, 128, Algorithm::kOneshotPull},
                      SharedCase{2, Pattern::kFp8PerGroup, 128, Algorithm::kOneshotPull},
                      SharedCase{4, Pattern::kResidualRmsNorm, 32, Algorithm::kTwoshot, 256,
                                 Algorithm::kOneshotPull},
                      SharedCase{4, Pattern::kAllReduce, 32, Algorithm::kOneshotPull},
                      SharedCase{8, Pattern::kResidualRmsNorm, 0, Algorithm::kTwoshot},
                      SharedCase{8, Pattern::kAllReduce, 0, Algorithm::kTwoshot}),
    [](const auto& info) {
      return "ws" + std::to_string(info.param.world) + "_" +
             std::to_string(static_cast<int>(info.param.pattern));
    });

TEST(Auto, LamportCapacityFallsBackToTwoshot) {
  const StaticFacts f = facts_for(8, 1, 1024, 1024, /*oneshot_max_tokens=*/16);
  EXPECT_EQ(plan_ok(fused(16, 1024), f).algorithm, Algorithm::kOneshotLamport);
  const Plan p = plan_ok(fused(17, 1024), f);  // 34 KiB: under the size limit, over the slot
  EXPECT_EQ(p.algorithm, Algorithm::kTwoshot);
  EXPECT_NE(p.reason.find("oneshot_lamport infeasible"), std::string::npos) << p.reason;
}

TEST(Forced, FeasibleIsHonoured) {
  const StaticFacts f = facts_for(4);
  for (Algorithm a : {Algorithm::kOneshotLamport, Algorithm::kOneshotPull, Algorithm::kTwoshot}) {
    const Plan p = plan_ok(fused(256, 4096, a), f);
    EXPECT_EQ(p.algorithm, a);
    EXPECT_EQ(p.inner_allreduce, a);
    EXPECT_EQ(p.num_kernels, 1);
    EXPECT_TRUE(p.forced);
  }
}

TEST(Forced, InfeasibleIsUnsupportedWithTheWhy) {
  const StaticFacts f = facts_for(8, 1, 1024, 8192, /*oneshot_max_tokens=*/64);
  Result<Plan> r = make_plan(fused(65, 8192, Algorithm::kOneshotLamport), f);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), arfUnsupported);
  EXPECT_NE(r.status().message().find("forced algorithm oneshot_lamport"), std::string::npos);
  EXPECT_NE(r.status().message().find("Lamport slot"), std::string::npos);

  r = make_plan(fused(1, 8192, Algorithm::kNccl), f);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), arfUnsupported);
  EXPECT_NE(r.status().message().find("no NCCL communicator"), std::string::npos);

  r = make_plan(fused(1025, 8192, Algorithm::kTwoshot), f);  // over max_tokens x max_hidden
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), arfUnsupported);
  EXPECT_NE(r.status().message().find("capacity"), std::string::npos);
}

TEST(Forced, UnsupportedWorldSize) {
  StaticFacts f = facts_for(3);
  std::string why;
  EXPECT_FALSE(algorithm_feasible(Algorithm::kTwoshot, fused(1, 4096), f, &why));
  EXPECT_NE(why.find("world 3"), std::string::npos);
  Result<Plan> r = make_plan(fused(1, 4096), f);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), arfUnsupported);
}

TEST(Unfused, InnerIsWhatAutoPicksForAPlainAllReduce) {
  const StaticFacts f = facts_for(8);
  const Plan small = plan_ok(fused(4, 4096, Algorithm::kUnfused), f);
  EXPECT_EQ(small.algorithm, Algorithm::kUnfused);
  EXPECT_EQ(small.inner_allreduce, Algorithm::kOneshotLamport);
  EXPECT_EQ(small.num_kernels, 2);
  EXPECT_TRUE(small.forced);
  const Plan big = plan_ok(fused(512, 4096, Algorithm::kUnfused), f);
  EXPECT_EQ(big.inner_allreduce, Algorithm::kTwoshot);
  // A plain all-reduce has no epilogue kernel.
  EXPECT_EQ(plan_ok(fused(4, 4096, Algorithm::kUnfused, Pattern::kAllReduce), f).num_kernels, 1);
}

TEST(Grid, OneCtaPerRowUpToTheCap) {
  EXPECT_EQ(plan_ok(fused(1, 4096), facts_for(8, 8)).grid, 1);
  EXPECT_EQ(plan_ok(fused(20, 4096), facts_for(8, 8)).grid, 20);
  EXPECT_EQ(plan_ok(fused(1000, 4096), facts_for(8, 8)).grid, 33);
  EXPECT_EQ(plan_ok(fused(1000, 4096), facts_for(8, 1)).grid, 264);
  EXPECT_EQ(plan_ok(fused(0, 4096), facts_for(8, 1)).grid, 1);  // no-op calls still plan
}

// World 1 runs no protocol with Lamport (or unfused over Lamport): a streaming kernel, one wave of
// two CTAs of 512 threads per SM (more of a smaller block, one of a wider one). Forced pull and twoshot keep
// the co-resident grid their plan reports at world 1 too; with nothing to exchange they run the
// streaming kernel (kernel_set.h), which covers the rows at any grid.
TEST(Grid, WorldOneLamportIsOneStreamingWave) {
  const StaticFacts f = facts_for(1, 1, 16384);
  EXPECT_EQ(plan_ok(fused(16384, 4096), f).grid, 264);  // 512 threads, 2 per SM x 132
  EXPECT_EQ(plan_ok(fused(100, 4096), f).grid, 100);    // one CTA per row below a wave
  EXPECT_EQ(plan_ok(fused(16384, 4096, Algorithm::kUnfused), f).grid, 264);
  EXPECT_EQ(plan_ok(fused(16384, 2048), f).grid, 528);  // 256 threads: 4 per SM
  EXPECT_EQ(plan_ok(fused(16384, 256), f).grid, 32 * 132);  // 32 threads: the 32-CTA hardware limit
  EXPECT_EQ(plan_ok(fused(16384, 16384), facts_for(1, 1, 16384, 16384)).grid, 132);  // 1024 threads: 1 per SM
  EXPECT_EQ(plan_ok(fused(16384, 4096, Algorithm::kTwoshot), f).grid, co_resident_grid_cap(f, 512));
  EXPECT_EQ(plan_ok(fused(16384, 4096, Algorithm::kOneshotPull), f).grid, co_resident_grid_cap(f, 512));
  EXPECT_EQ(plan_ok(fused(3000, 4096), facts_for(2, 1, 16384)).grid, co_resident_grid_cap(facts_for(2, 1), 512));
}

// The second kernel of a split call is a streaming kernel too, at any world size.
TEST(Grid, EpilogueGridIsOneStreamingWave) {
  EXPECT_EQ(plan_ok(fused(4096, 8192, Algorithm::kUnfused), facts_for(8, 8, 4096)).epilogue_grid, 264);
  EXPECT_EQ(plan_ok(fused(4096, 8192, Algorithm::kUnfused), facts_for(2, 1, 4096)).epilogue_grid, 264);
  EXPECT_EQ(plan_ok(fused(7, 8192, Algorithm::kUnfused), facts_for(2, 1, 4096)).epilogue_grid, 7);
  EXPECT_EQ(plan_ok(fused(0, 8192, Algorithm::kUnfused), facts_for(2, 1, 4096)).epilogue_grid, 1);
}

// Fuzz: random communicators and shapes. For each, the plan is computed as every rank would (from
// its own copy of the agreed facts) and must be identical; invariants on feasibility, grid, block
// and workspace capacity must hold.
TEST(Symmetry, RandomShapesDeterministicAndWithinLimits) {
  std::mt19937_64 rng(20261129);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int worlds[] = {1, 2, 4, 8};
  int planned = 0;
  for (int iter = 0; iter < 10000; ++iter) {
    const int world = worlds[pick(0, 3)];
    const int per_device = static_cast<int>(pick(0, 1) ? world : 1);
    const int64_t max_tokens = pick(1, 4096);
    const int64_t max_hidden = pick(1, kMaxHidden / 8) * 8;
    StaticFacts f = facts_for(world, per_device, max_tokens, max_hidden, pick(1, max_tokens));
    f.min_sm_count = static_cast<int>(pick(1, 200));
    f.dtype = pick(0, 1) ? DType::kFp16 : DType::kBf16;
    CallShape s = fused(pick(0, max_tokens), static_cast<int>(pick(1, max_hidden / 8) * 8),
                        static_cast<Algorithm>(pick(0, 5)),
                        pick(0, 1) ? Pattern::kAllReduce : Pattern::kResidualRmsNorm);
    s.dtype = f.dtype;

    const Result<Plan> first = make_plan(s, f);
    for (int rank = 1; rank < world; ++rank) {
      const StaticFacts facts_copy = f;
      const CallShape shape_copy = s;
      const Result<Plan> other = make_plan(shape_copy, facts_copy);
      ASSERT_EQ(other.is_ok(), first.is_ok());
      if (!first.is_ok()) {
        ASSERT_EQ(other.status().message(), first.status().message());
        continue;
      }
      const Plan& a = first.value();
      const Plan& b = other.value();
      ASSERT_TRUE(a.algorithm == b.algorithm && a.inner_allreduce == b.inner_allreduce &&
                  a.grid == b.grid && a.block == b.block && a.num_kernels == b.num_kernels &&
                  a.forced == b.forced && a.reason == b.reason);
    }
    if (!first.is_ok()) {
      ASSERT_EQ(first.status().code(), arfUnsupported);
      ASSERT_NE(s.requested, Algorithm::kAuto) << first.status().message();
      continue;
    }
    ++planned;
    const Plan& p = first.value();
    ASSERT_NE(p.algorithm, Algorithm::kAuto);
    ASSERT_NE(p.inner_allreduce, Algorithm::kAuto);
    ASSERT_GE(p.grid, 1);
    ASSERT_LE(p.grid, grid_cap(p, f));
    ASSERT_EQ(p.grid, std::min<int64_t>(std::max<int64_t>(s.num_rows, 1), grid_cap(p, f)));
    ASSERT_EQ(p.epilogue_grid, std::min<int64_t>(std::max<int64_t>(s.num_rows, 1),
                                                 protocol_free_grid_cap(f, p.block)));
    ASSERT_LE(p.epilogue_grid, 32 * f.min_sm_count);
    if (world > 1) ASSERT_LE(p.grid, co_resident_grid_cap(f, p.block));
    ASSERT_EQ(p.block, block_threads_for_row(s.row_elems));
    ASSERT_TRUE(algorithm_feasible(p.inner_allreduce, s, f, nullptr));

    // Whatever runs must fit in the regions workspace.cc allocates for this communicator.
    Result<WorkspaceLayout> layout =
        workspace_layout(world, f.dtype, max_tokens, max_hidden, f.oneshot_max_tokens);
    ASSERT_TRUE(layout.is_ok());
    const WorkspaceLayout& l = layout.value();
    switch (p.inner_allreduce) {
      case Algorithm::kOneshotLamport: ASSERT_LE(s.num_elems, l.lamport_slot_elems); break;
      case Algorithm::kOneshotPull: ASSERT_LE(s.num_elems, l.capacity_elems); break;
      case Algorithm::kTwoshot: {
        const int64_t part = (s.row_elems / 8 + world - 1) / world * 8;
        ASSERT_LE(s.num_rows * part, l.scatter_slot_elems);
        ASSERT_LE(s.num_elems, l.capacity_elems);
        break;
      }
      default: FAIL() << "unexpected inner algorithm";
    }
  }
  EXPECT_GT(planned, 5000);
}

TEST(WorkspaceLayout, SixtyFourBitSizesAndAlignedDisjointRegions) {
  // The FlashInfer overflow case: max_token 131072 — here with max_hidden 16384 and world 8.
  Result<WorkspaceLayout> r = workspace_layout(8, DType::kBf16, 131072, 16384, 131072);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const WorkspaceLayout& l = r.value();
  EXPECT_EQ(l.lamport_slot_elems, int64_t{131072} * 16384);
  EXPECT_EQ(l.scatter_slot_elems, int64_t{131072} * 2048);
  EXPECT_GT(l.total_bytes, int64_t{1} << 32);
  const int64_t offsets[] = {l.ctrl_offset,    l.flags_offset,  l.verify_offset,
                             l.lamport_offset, l.pull_offset,   l.scatter_offset,
                             l.gather_offset,  l.scratch_offset};
  const int64_t sizes[] = {static_cast<int64_t>(sizeof(ControlBlock)),
                           int64_t{kFlagRows} * kMaxRanks * 8, kVerifyWords * 4,
                           l.lamport_elems() * 2, l.capacity_elems * 2,
                           l.scatter_slot_elems * 8 * 2, l.capacity_elems * 2,
                           l.capacity_elems * 2};
  constexpr int kRegions = 8;
  for (int i = 0; i < kRegions; ++i) {
    EXPECT_EQ(offsets[i] % kWorkspaceAlignBytes, 0) << i;
    if (i > 0) EXPECT_GE(offsets[i], offsets[i - 1] + sizes[i - 1]) << i;
  }
  EXPECT_LE(offsets[kRegions - 1] + sizes[kRegions - 1], l.total_bytes);

  Result<WorkspaceLayout> overflow =
      workspace_layout(8, DType::kBf16, int64_t{1} << 50, 16384, int64_t{1} << 50);
  ASSERT_FALSE(overflow.is_ok());
  EXPECT_EQ(overflow.status().code(), arfInvalidArgument);
  EXPECT_NE(overflow.status().message().find("overflows"), std::string::npos);
}

TEST(WorkspaceLayout, TwoshotPartsRoundUpPerRank) {
  // hidden 2880 = 360 vectors over 8 ranks = 45 vectors each; over 4096 tokens.
  Result<WorkspaceLayout> r = workspace_layout(8, DType::kFp16, 4096, 2880, 128);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value().scatter_slot_elems, int64_t{4096} * 45 * 8);
  EXPECT_EQ(r.value().lamport_slot_elems, int64_t{128} * 2880);
}

}  // namespace
}  // namespace arf
