// CPU tests of the command line (options.h), including the arfusion-run environment.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "options.h"

namespace arf::stress {
namespace {

struct Parsed {
  std::optional<StressOptions> o;
  int code = -1;
};

Parsed parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  args.insert(args.begin(), "arfusion-stress");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  Parsed p;
  p.o = parse_stress_options(static_cast<int>(argv.size()), argv.data(), &p.code, [&](const char* name) {
    const auto it = env.find(name);
    return it == env.end() ? static_cast<const char*>(nullptr) : it->second.c_str();
  });
  return p;
}

TEST(StressOptions, Defaults) {
  const Parsed p = parse({});
  ASSERT_TRUE(p.o);
  const StressOptions& o = *p.o;
  EXPECT_EQ(o.devices, (std::vector<int>{0, 0}));
  EXPECT_EQ(o.patterns, (std::vector<Pat>{Pat::kAllReduce, Pat::kFlat, Pat::kResidualRmsNorm, Pat::kFp8Tensor,
                                          Pat::kFp8Token, Pat::kFp8Group, Pat::kNvfp4, Pat::kMxfp4}));
  EXPECT_EQ(o.algos, (std::vector<arfAlgorithm_t>{arfAlgoAuto, arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                                  arfAlgoTwoshot, arfAlgoUnfused}));
  EXPECT_EQ(o.max_hidden, 16384);
  EXPECT_EQ(o.hiddens, (std::vector<int64_t>{128, 1024, 2048, 4096, 5120, 7168, 8192, 12288, 16384}));
  EXPECT_EQ(o.calls, 10000u);
  EXPECT_EQ(o.table_calls, 10000u);
  EXPECT_EQ(o.in_flight, 8);
  EXPECT_EQ(o.skew_us, 50);
  EXPECT_EQ(o.foreign_block, 1024);
  EXPECT_EQ(o.foreign_smem_kb, 96);
  EXPECT_EQ(o.timeout_seconds, 10);
  EXPECT_EQ(o.hang_seconds, 120);
  EXPECT_FALSE(o.processes());
}

TEST(StressOptions, WorldAndBudget) {
  Parsed p = parse({"--nranks", "8", "--seconds", "30", "--max-hidden", "16384", "--connections", "1",
                    "--verify-calls", "--patterns", "nvfp4,mxfp4,fp8_tensor", "-a", "twoshot"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->devices.size(), 8u);
  EXPECT_EQ(p.o->calls, 0u);  // a time budget alone
  EXPECT_EQ(p.o->table_calls, uint64_t{1} << 20);
  EXPECT_EQ(p.o->hiddens.back(), 16384);
  EXPECT_EQ(p.o->connections, 1);
  EXPECT_TRUE(p.o->verify_calls);
  EXPECT_EQ(p.o->patterns.size(), 3u);
  EXPECT_EQ(p.o->reference, ReferenceMode::kRotate);  // by default
  EXPECT_EQ(p.o->input_buffer_percent, 33);
  p = parse({"--nranks", "2", "--reference", "all"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->reference, ReferenceMode::kAll);
  p = parse({"--nranks", "2", "--reference", "split"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->reference, ReferenceMode::kSplit);
  p = parse({"--replay", "calls.csv"});  // the CSV is the call: no input-buffer draws unless asked
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->input_buffer_percent, 0);
  p = parse({"--replay", "calls.csv", "--input-buffer-percent", "50"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->input_buffer_percent, 50);
  p = parse({"--devices", "0,1,0,1"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->devices, (std::vector<int>{0, 1, 0, 1}));
  p = parse({"--corrupt-every", "10", "--calls", "1000"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->corrupt_every, 10u);
}

TEST(StressOptions, Refusals) {
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--nranks", "3"},
           {"--reference", "some"},
           {"--input-buffer-percent", "101"},
           {"--patterns", "bogus"},
           {"-a", "fastest"},
           {"--hiddens", "100"},                                  // not a multiple of 8
           {"--hiddens", "136", "--patterns", "fp8_group"},       // no hidden fits 1x128 groups
           {"--hiddens", "16384", "--max-hidden", "8192"},        // above --max-hidden
           {"--foreign-block", "100"},
           {"--foreign-smem-kb", "500"},
           {"--in-flight", "0"},
           {"--nranks", "2", "--devices", "0,0"},
           {"--corrupt-every", "10", "--seconds", "5"},           // the self-test needs a call budget
           {"--corrupt-every", "10", "--calls", "100", "--expect-failure"},
           {"--corrupt-every", "10", "--calls", "100", "--table-calls", "50"},  // entries would fold
       }) {
    const Parsed p = parse(bad);
    EXPECT_FALSE(p.o) << bad[0] << " " << bad[1];
    EXPECT_EQ(p.code, kStressSetup) << bad[0] << " " << bad[1];
  }
  const Parsed help = parse({"--help"});
  EXPECT_FALSE(help.o);
  EXPECT_EQ(help.code, kStressOk);
}

// --co-resident: the soak's kernels leave the rank streams, one call at a time there; the options that
// would put them back (or time them there) are refused, and so is the library's mode without it.
TEST(StressOptions, CoResidentRefusesKernelsOnTheRankStreams) {
  Parsed p = parse({"--co-resident", "--nranks", "8"});
  ASSERT_TRUE(p.o);
  EXPECT_TRUE(p.o->co_resident);
  EXPECT_EQ(p.o->in_flight, 2);  // ring slots: the side stream checks one call while the next runs
  EXPECT_EQ(p.o->foreign_block, kCoResidentSideBlock);
  EXPECT_EQ(p.o->foreign_smem_kb, 0);
  EXPECT_FALSE(parse({}).o->co_resident);
  EXPECT_TRUE(parse({"--co-resident", "--corrupt-every", "7", "--calls", "700"}).o);
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--co-resident", "--in-flight", "8"},
           {"--co-resident", "--in-flight", "1"},
           {"--co-resident", "--foreign-block", "1024"},
           {"--co-resident", "--foreign-smem-kb", "0"},
           {"--co-resident", "--foreign-grid", "16"},
           {"--co-resident", "--time-segments"},
       }) {
    const Parsed refused = parse(bad);
    EXPECT_FALSE(refused.o) << bad[1];
    EXPECT_EQ(refused.code, kStressSetup) << bad[1];
  }
  // The environment variable the soak sets itself: set from outside without the option, the soak
  // would run its kernels on the rank streams of a library without the return wait.
  EXPECT_FALSE(parse({}, {{"ARF_TEST_CO_RESIDENT", "1"}}).o);
  EXPECT_TRUE(parse({}, {{"ARF_TEST_CO_RESIDENT", "0"}}).o);
  EXPECT_TRUE(parse({"--co-resident"}, {{"ARF_TEST_CO_RESIDENT", "1"}}).o);
}

TEST(StressOptions, Graphs) {
  Parsed p = parse({"-G", "8", "--window", "3", "--calls", "100"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->graphs, 8);
  EXPECT_EQ(p.o->window, 3);
  EXPECT_EQ(p.o->table_calls, 103u) << "a graph step may end up to window - 1 calls past the budget";
  EXPECT_EQ(step_options(*p.o).graphs, 8);
  EXPECT_TRUE(parse({"--graphs", "2", "--co-resident"}).o);
  EXPECT_TRUE(parse({"--graphs", "2", "--corrupt-every", "5", "--calls", "100"}).o);
  for (const std::vector<std::string>& bad : std::vector<std::vector<std::string>>{
           {"--graphs", "2", "--replay", "calls.csv"},
           {"--graphs", "2", "--write-schedule", "out.csv"},
           {"--graphs", "2", "--time-segments"},
           {"--graphs", "65"},
           {"--graphs", "2", "--window", "0"},
           {"--graphs", "2", "--corrupt-every", "5", "--calls", "100", "--table-calls", "100"},
       }) {
    const Parsed refused = parse(bad);
    EXPECT_FALSE(refused.o) << bad[0] << " " << bad[1] << " " << bad[2];
    EXPECT_EQ(refused.code, kStressSetup);
  }
}

TEST(StressOptions, UnderTheLauncher) {
  const std::map<std::string, std::string> env = {
      {"ARF_RENDEZVOUS_ID", "0123456789abcdef0123456789abcdef"}, {"ARF_RANK", "1"}, {"ARF_WORLD_SIZE", "2"}};
  Parsed p = parse({"--calls", "100"}, env);
  ASSERT_TRUE(p.o);
  EXPECT_TRUE(p.o->processes());
  EXPECT_EQ(p.o->process_rank, 1);
  EXPECT_EQ(p.o->world(), 2);
  EXPECT_EQ(p.o->rendezvous_id, "0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(parse({"--seconds", "5"}, env).o);      // processes stop on calls only
  EXPECT_FALSE(parse({"--nranks", "2"}, env).o);       // the launcher places ranks
  EXPECT_FALSE(parse({"--calls-per-algorithm", "0", "--seconds", "1"}, env).o);
  EXPECT_TRUE(parse({"--calls-per-algorithm", "10"}, env).o);
  EXPECT_TRUE(parse({}, env).o);  // the default call budget
  std::map<std::string, std::string> broken = env;
  broken["ARF_WORLD_SIZE"] = "3";
  EXPECT_FALSE(parse({}, broken).o);
  broken.erase("ARF_RANK");
  EXPECT_FALSE(parse({}, broken).o);
}

TEST(StressOptions, Lists) {
  EXPECT_EQ(parse_int_list("1,2,,3"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_THROW(parse_int_list("1,x"), std::exception);
  EXPECT_EQ(parse_pattern_list("flat,flat,allreduce").size(), 2u);
  EXPECT_THROW(parse_algorithm_list(""), std::exception);
}

TEST(StressOptions, AlgorithmWeights) {
  const AlgorithmDraw d = parse_algorithm_list("twoshot:3,unfused,twoshot:3,oneshot_pull:1000");
  EXPECT_EQ(d.algos, (std::vector<arfAlgorithm_t>{arfAlgoTwoshot, arfAlgoUnfused, arfAlgoOneshotPull}));
  EXPECT_EQ(d.weights, (std::vector<uint32_t>{3, 1, 1000}));
  EXPECT_EQ(parse_algorithm_list("unfused,unfused:1").weights, (std::vector<uint32_t>{1}));
  for (const char* bad : {"unfused:2,unfused", "unfused:0", "unfused:", "unfused:x", "unfused:2x",
                          "unfused:-1", "unfused:1001", "unfused:99999999999999999999", "nosuch:2"}) {
    EXPECT_THROW(parse_algorithm_list(bad), std::invalid_argument) << bad;
  }
  const Parsed p = parse({"-a", "oneshot_lamport:2,unfused"});
  ASSERT_TRUE(p.o);
  EXPECT_EQ(p.o->algo_weights, (std::vector<uint32_t>{2, 1}));
  EXPECT_EQ(schedule_options(*p.o).algo_weights, p.o->algo_weights);
  EXPECT_FALSE(parse({"-a", "unfused:0"}).o);
  const Parsed defaults = parse({});
  ASSERT_TRUE(defaults.o);
  EXPECT_EQ(defaults.o->algo_weights, std::vector<uint32_t>(defaults.o->algos.size(), 1));
}

}  // namespace
}  // namespace arf::stress
