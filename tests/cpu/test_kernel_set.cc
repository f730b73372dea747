// The kernel set (src/launch/kernel_set.def) against the planner: every kernel any plan launches
// is declared (a pruned kernel a plan still reaches would fail at launch on a GPU), every declared
// kernel is launched by some plan (nothing is built that no plan can choose), the count the build
// took at configure time (write_kernel_units.cc; the kernel_budget ctest's) equals the table this
// test is compiled with, and the launcher's table numbers the declared kernels one to one.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/plan_test_util.h"
#include "launch/kernel_set.h"
#include "policy/policy.h"

namespace arf {
namespace {

using KeyTuple = std::tuple<int, int, int, int, int, int>;

KeyTuple tuple_of(const KernelKey& k) {
  return {static_cast<int>(k.dtype), static_cast<int>(k.kernel), k.world, static_cast<int>(k.patterns),
          static_cast<int>(k.pattern), k.vecs};
}

std::string text_of(const KernelKey& k) {
  return "dtype " + std::to_string(static_cast<int>(k.dtype)) + " kernel " +
         std::to_string(static_cast<int>(k.kernel)) + " world " + std::to_string(k.world) + " set " +
         std::to_string(static_cast<int>(k.patterns)) + " pattern " +
         std::to_string(static_cast<int>(k.pattern)) + " vecs " + std::to_string(k.vecs);
}

// Every kernel the rows declare, expanded.
std::set<KeyTuple> declared_keys() {
  std::set<KeyTuple> keys;
  for (const KernelRow& row : kKernelRows) {
    std::vector<int> worlds;
    if (row.kernel == KernelKind::kLocalEpilogue) {
      worlds.push_back(0);
    } else {
      for (int w : row.worlds) {
        if (w != 0) worlds.push_back(w);
      }
    }
    for (int w : worlds) {
      for (Pattern p : patterns_in(row.patterns)) {
        for (int v : kVecCounts) {
          const KernelKey key{row.dtype, row.kernel, w, row.patterns, p, v};
          EXPECT_TRUE(declared(key)) << text_of(key);
          keys.insert(tuple_of(key));
        }
      }
    }
  }
  return keys;
}

StaticFacts facts_of(int world, int ranks_per_device, DType dtype, bool nccl) {
  StaticFacts f;
  f.world = world;
  f.dtype = dtype;
  f.max_tokens = 1024;
  f.max_hidden = kMaxHidden;
  f.oneshot_max_tokens = 1024;
  f.min_sm_count = 132;
  f.max_ranks_per_device = ranks_per_device;
  f.nccl = nccl;
  return f;
}

TEST(KernelSet, CountsAgree) {
  const std::set<KeyTuple> keys = declared_keys();
  EXPECT_EQ(static_cast<int>(keys.size()), declared_kernel_count()) << "two rows declare one kernel";
#if defined(ARF_DECLARED_KERNELS)
  EXPECT_EQ(declared_kernel_count(), ARF_DECLARED_KERNELS)
      << "the build's kernel count (written by write_kernel_units.cc when CMake configured) is not "
         "kernel_set.h's: configure again";
#endif
}

// The launcher's kernel table (launch.cu) keeps each built kernel at kernel_index: the declared
// kernels numbered 0, 1, ... in row order and, within a row, in the order kernel_row.cuh builds
// them (world, pattern, vector count); every key no row declares gets -1.
TEST(KernelSet, KernelIndexNumbersTheDeclaredKernels) {
  int next = 0;
  for (const KernelRow& row : kKernelRows) {
    std::vector<int> worlds;
    for (int w : row.worlds) {
      if (w != 0) worlds.push_back(w);
    }
    if (row.kernel == KernelKind::kLocalEpilogue) worlds = {0};
    for (int w : worlds) {
      for (Pattern p : patterns_in(row.patterns)) {
        for (int v : kVecCounts) {
          const KernelKey key{row.dtype, row.kernel, w, row.patterns, p, v};
          EXPECT_EQ(kernel_index(key), next) << text_of(key);
          ++next;
        }
      }
    }
  }
  EXPECT_EQ(next, declared_kernel_count());
  const KernelKey undeclared[] = {
      {DType::kBf16, KernelKind::kOneshotPull, 1, PatternSet::kPlain, Pattern::kAllReduce, 1},       // world 1: lamport's
      {DType::kBf16, KernelKind::kTwoshot, 3, PatternSet::kPlain, Pattern::kAllReduce, 1},           // no world 3
      {DType::kFp16, KernelKind::kLocalEpilogue, 0, PatternSet::kNorm, Pattern::kAllReduce, 1},      // no epilogue
      {DType::kBf16, KernelKind::kOneshotLamport, 2, PatternSet::kPlain, Pattern::kNvfp4, 1},        // wrong set
      {DType::kBf16, KernelKind::kOneshotLamport, 2, PatternSet::kPlain, Pattern::kAllReduce, 3},    // no 3 vectors
      {DType::kFp32, KernelKind::kOneshotLamport, 2, PatternSet::kPlain, Pattern::kAllReduce, 1},    // no fp32 row
      {DType::kBf16, KernelKind::kLocalEpilogue, 2, PatternSet::kQuant, Pattern::kNvfp4, 1},         // epilogue: world 0
  };
  for (const KernelKey& key : undeclared) {
    EXPECT_FALSE(declared(key)) << text_of(key);
    EXPECT_EQ(kernel_index(key), -1) << text_of(key);
  }
}

// Forced algorithms and levels over every world, sharing, dtype, pattern and vector count: the
// set of kernels the launcher would run is exactly the declared set.
TEST(KernelSet, PlansLaunchExactlyTheDeclaredKernels) {
  const std::set<KeyTuple> declared_set = declared_keys();
  std::set<KeyTuple> launched;
  int plans = 0;
  const Algorithm algorithms[] = {Algorithm::kAuto,    Algorithm::kOneshotLamport, Algorithm::kOneshotPull,
                                  Algorithm::kTwoshot, Algorithm::kUnfused,        Algorithm::kNccl};
  const Pattern patterns[] = {Pattern::kAllReduce,   Pattern::kResidualRmsNorm, Pattern::kFp8PerTensor,
                              Pattern::kFp8PerToken, Pattern::kFp8PerGroup,     Pattern::kNvfp4,
                              Pattern::kMxfp4};
  for (int world : {1, 2, 4, 8}) {
    for (int sharing : {1, world}) {
      for (DType dtype : {DType::kBf16, DType::kFp16}) {
        for (bool nccl : {false, true}) {
          const StaticFacts facts = facts_of(world, sharing, dtype, nccl && world > 1 && sharing == 1);
          for (Algorithm algorithm : algorithms) {
            for (Pattern pattern : patterns) {
              for (int level = 0; level <= (is_quant_pattern(pattern) ? 3 : 0); ++level) {
                for (int hidden : {256, 4096, 8192, 16384}) {  // 1, 1, 2, 2 vectors (16384: 1024 threads)
                  for (int64_t tokens : {1, 300, 1024}) {
                    CallShape shape = call_shape(tokens, hidden, pattern, algorithm, level);
                    shape.dtype = dtype;
                    const Result<Plan> plan = make_plan(shape, facts);
                    if (!plan.is_ok()) continue;
                    ++plans;
                    const Plan& p = plan.value();
                    CallKernels call;
                    if (p.algorithm == Algorithm::kNccl) {
                      if (pattern == Pattern::kAllReduce) continue;  // NCCL alone
                      call.keys[0] = epilogue_kernel_key(dtype, pattern, vecs_per_thread(hidden, p.block), false);
                      call.count = 1;
                    } else {
                      call = call_kernels(p, pattern, dtype, world, p.fallback_level, hidden);
                    }
                    ASSERT_GE(call.count, 1) << p.reason;
                    // nccl's first kernel is NCCL's own.
                    ASSERT_EQ(call.count + (p.algorithm == Algorithm::kNccl ? 1 : 0), p.num_kernels) << p.reason;
                    for (int i = 0; i < call.count; ++i) {
                      const KernelKey& key = call.keys[static_cast<size_t>(i)];
                      ASSERT_TRUE(declared(key)) << text_of(key) << " for " << p.reason;
                      launched.insert(tuple_of(key));
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(plans, 10000);
  for (const KeyTuple& k : declared_set) {
    EXPECT_TRUE(launched.count(k) == 1) << "declared but no plan launches it: dtype " << std::get<0>(k)
                                        << " kernel " << std::get<1>(k) << " world " << std::get<2>(k)
                                        << " set " << std::get<3>(k) << " pattern " << std::get<4>(k)
                                        << " vecs " << std::get<5>(k);
  }
  EXPECT_EQ(launched.size(), declared_set.size());
}

// No peer at world 1: every fused algorithm runs oneshot_lamport's world-1 (streaming) kernel,
// unfused's inner all-reduce included.
TEST(KernelSet, WorldOneRunsTheStreamingKernel) {
  const StaticFacts facts = facts_of(1, 1, DType::kBf16, false);
  for (Algorithm algorithm : {Algorithm::kOneshotLamport, Algorithm::kOneshotPull, Algorithm::kTwoshot}) {
    for (int level : {0, 1, 2, 3}) {
      const Plan p = plan_ok(call_shape(64, 4096, Pattern::kFp8PerToken, algorithm, level), facts);
      const CallKernels call = call_kernels(p, Pattern::kFp8PerToken, DType::kBf16, 1, p.fallback_level, 4096);
      ASSERT_GE(call.count, 1);
      EXPECT_EQ(call.keys[0].kernel, KernelKind::kOneshotLamport) << p.reason;
      EXPECT_EQ(call.keys[0].world, 1) << p.reason;
    }
  }
  const Plan forced_pull = plan_ok(call_shape(64, 4096, Pattern::kResidualRmsNorm, Algorithm::kOneshotPull), facts);
  EXPECT_EQ(forced_pull.algorithm, Algorithm::kOneshotPull);  // the plan still names the request
}

// The chains: unfused allreduce is one kernel, level 2 ends in the quantize-only epilogue.
TEST(KernelSet, Chains) {
  const StaticFacts facts = facts_of(4, 1, DType::kFp16, false);
  const Plan unfused = plan_ok(call_shape(8, 4096, Pattern::kAllReduce, Algorithm::kUnfused), facts);
  const CallKernels a = call_kernels(unfused, Pattern::kAllReduce, DType::kFp16, 4, unfused.fallback_level, 4096);
  EXPECT_EQ(a.chain, KernelChain::kUnfused);
  EXPECT_EQ(a.count, 1);
  const Plan level2 = plan_ok(call_shape(8, 8192, Pattern::kNvfp4, Algorithm::kTwoshot, 2), facts);
  const CallKernels b = call_kernels(level2, Pattern::kNvfp4, DType::kFp16, 4, level2.fallback_level, 8192);
  EXPECT_EQ(b.chain, KernelChain::kLevel2);
  ASSERT_EQ(b.count, 2);
  EXPECT_EQ(b.keys[0].kernel, KernelKind::kTwoshot);
  EXPECT_EQ(b.keys[0].pattern, Pattern::kResidualRmsNorm);
  EXPECT_EQ(b.keys[0].vecs, 2);
  EXPECT_EQ(b.keys[1].kernel, KernelKind::kLocalEpilogue);
  EXPECT_EQ(b.keys[1].patterns, PatternSet::kQuantOnly);
  Plan nccl_like = level2;
  nccl_like.algorithm = Algorithm::kNccl;
  EXPECT_EQ(call_kernels(nccl_like, Pattern::kNvfp4, DType::kFp16, 4, 3, 8192).count, 0);
}

// Staged rows (streaming_epilogue.cuh): exactly the protocol-free kernels of residual + RMSNorm
// and of the FP8 patterns (norm + quantization, not quantize-only) stage (every vector count),
// and every staged launch a plan can make fits its SM's shared memory within the limit
// preload_kernels sets.
TEST(KernelSet, StagedRowsRuleAndSharedMemory) {
  for (const KeyTuple& t : declared_keys()) {
    const KernelKey key{static_cast<DType>(std::get<0>(t)), static_cast<KernelKind>(std::get<1>(t)), std::get<2>(t),
                        static_cast<PatternSet>(std::get<3>(t)), static_cast<Pattern>(std::get<4>(t)), std::get<5>(t)};
    const bool protocol_free = key.kernel == KernelKind::kLocalEpilogue || key.world == 1;
    const bool fp8 = key.pattern == Pattern::kFp8PerTensor || key.pattern == Pattern::kFp8PerToken ||
                     key.pattern == Pattern::kFp8PerGroup;
    const bool staged_pattern = key.pattern == Pattern::kResidualRmsNorm || (fp8 && key.patterns == PatternSet::kQuant);
    const bool expected = protocol_free && staged_pattern;
    EXPECT_EQ(stages_rows(key), expected) << text_of(key);
    for (int hidden = 8; hidden <= kMaxHidden; hidden += 8) {
      const int block = block_threads_for_row(hidden);
      if (vecs_per_thread(hidden, block) != key.vecs) continue;
      const size_t smem = staged_rows_smem_bytes(key, hidden);
      if (!expected) {
        EXPECT_EQ(smem, 0u) << text_of(key);
        continue;
      }
      EXPECT_EQ(smem, static_cast<size_t>(kStagedRowBuffers) * 2 * ((hidden + 7) / 8) * 16) << hidden;
      // widest_staged_row inverts it: this row is the widest that fits its own bytes.
      EXPECT_EQ(widest_staged_row(smem), hidden) << text_of(key);
      EXPECT_GT(staged_rows_smem_bytes(key, hidden + kElemsPerVec), smem) << text_of(key);
      EXPECT_EQ(widest_staged_row(smem + 95), hidden) << text_of(key);
      EXPECT_EQ(widest_staged_row(smem + 96), hidden + kElemsPerVec) << text_of(key);
      ASSERT_LE(smem, kMaxStagedRowsSmemBytes) << text_of(key) << " hidden " << hidden;
      // The CTAs per SM of a protocol-free grid fit in 227 KiB (correctness does not need them resident).
      const StaticFacts facts = facts_of(1, 1, key.dtype, false);
      const int per_sm = protocol_free_grid_cap(facts, block) / facts.min_sm_count;
      EXPECT_LE(smem * static_cast<size_t>(per_sm), size_t{227} * 1024) << text_of(key) << " hidden " << hidden;
    }
  }
}

}  // namespace
}  // namespace arf
