// arfusion-bench --tune-out (bench/tune.h): its argument rules, the choice per token count (fastest
// valid column, ties within 1% to the simpler, wrong or failed cells never chosen), the merge of
// equal choices into ranges, merging into an existing file (same machine only), and the summary's
// goal line. Pure host code over hand-made rows: no GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "args.h"
#include "tune.h"

namespace arf::bench {
namespace {

std::optional<BenchArgs> parse(std::vector<std::string> words, std::string* err) {
  words.insert(words.begin(), "arfusion-bench");
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  int code = 0;
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  std::optional<BenchArgs> a = parse_args(static_cast<int>(words.size()), argv.data(), &code);
  *err = testing::internal::GetCapturedStderr() + testing::internal::GetCapturedStdout();
  return a;
}

TEST(TuneArgs, AcceptedOnTheFusedSweepFromOneToken) {
  std::string err;
  std::optional<BenchArgs> a = parse({"--tune-out", "t.json", "--tokens", "1,2,3,4,8"}, &err);
  ASSERT_TRUE(a.has_value()) << err;
  EXPECT_EQ(a->tune_out, "t.json");
  a = parse({"--tune-out", "t.json"}, &err);  // default sweep: powers of two from 1
  ASSERT_TRUE(a.has_value()) << err;
}

TEST(TuneArgs, Rejections) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--tune-out", "t.json", "--op", "allreduce"}, "only with --op fused"},
      {{"--tune-out", "t.json", "--tmin", "2"}, "token counts must increase from 1"},
      {{"--tune-out", "t.json", "--tokens", "1,4,2"}, "token counts must increase from 1"},
      {{"--tune-out", "t.json", "--tokens", "1,2,2"}, "token counts must increase from 1"},
      {{"--tune-out", "t.json", "-a", "auto"}, "-a must include"},
  };
  for (const auto& [words, reason] : cases) {
    std::string err;
    EXPECT_FALSE(parse(words, &err).has_value()) << words[2];
    EXPECT_NE(err.find(reason), std::string::npos) << "expected '" << reason << "' in: " << err;
  }
}

Cell cell(const std::string& column, double us, int64_t wrong = 0) {
  Cell c;
  c.column = column;
  c.us = us;
  c.wrong = wrong;
  c.chosen = column;
  return c;
}

// One row: lamport, pull, twoshot, unfused, auto (auto's chosen set to `auto_algo`).
Row row(int64_t tokens, double lamport, double pull, double twoshot, double unfused,
        double auto_us = NAN, const std::string& auto_algo = "oneshot_lamport") {
  Row r;
  r.tokens = tokens;
  r.row_elems = 8192;
  r.cells = {cell("unfused", unfused), cell("oneshot_lamport", lamport), cell("oneshot_pull", pull),
             cell("twoshot", twoshot)};
  if (!std::isnan(auto_us)) {
    Cell a = cell("auto", auto_us);
    a.chosen = auto_algo;
    r.cells.push_back(a);
  }
  return r;
}

TEST(TuneChoice, FastestWinsTiesGoToTheSimpler) {
  std::string why;
  EXPECT_EQ(choose_column(row(1, 10, 12, 11, 20), &why), "oneshot_lamport");
  EXPECT_EQ(choose_column(row(1, 10, 12, 9, 20), &why), "twoshot");
  // twoshot is fastest but lamport is within 1%: the simpler wins.
  EXPECT_EQ(choose_column(row(1, 10.09, 12, 10, 20), &why), "oneshot_lamport");
  EXPECT_EQ(choose_column(row(1, 10.11, 12, 10, 20), &why), "twoshot");
  EXPECT_EQ(choose_column(row(1, 30, 30, 30, 10), &why), "unfused");
}

TEST(TuneChoice, WrongFailedAndUnsupportedCellsNeverDecide) {
  Row r = row(64, 5, 12, 11, 20);
  r.cells[1].wrong = 3;  // lamport was fast but wrong
  std::string why;
  EXPECT_EQ(choose_column(r, &why), "twoshot");
  r.cells[3].error = "timeout";
  r.cells[3].us = NAN;
  EXPECT_EQ(choose_column(r, &why), "oneshot_pull");
  r.cells[2].unsupported = true;
  r.cells[2].error = "n/a";
  EXPECT_EQ(choose_column(r, &why), "unfused");
  r.cells[0].us = NAN;
  EXPECT_FALSE(choose_column(r, &why).has_value());
  EXPECT_EQ(why, "no algorithm has a valid time at 64 tokens");
}

const TuningKey kKey{8, RankSharing::kOnePerDevice, DType::kBf16, TuningGroup::kPlain, 8192};

TEST(TuneEntry, EqualNeighboursMergeIntoRanges) {
  const std::vector<Row> rows = {row(1, 10, 12, 11, 20),  row(2, 10, 12, 11, 20),
                                 row(4, 11, 12, 10, 20),  row(8, 12, 12, 10, 20),
                                 row(16, 12, 12, 10, 20), row(32, 40, 30, 30.2, 35),
                                 row(64, 80, 70, 60, 50)};
  std::string why;
  const std::optional<TuningEntry> e = derive_entry(rows, kKey, &why);
  ASSERT_TRUE(e.has_value()) << why;
  EXPECT_EQ(e->max_tokens, 64);
  const std::vector<TuningRange> expected = {{1, Algorithm::kOneshotLamport, 1},
                                             {4, Algorithm::kTwoshot, 1},
                                             {32, Algorithm::kOneshotPull, 1},
                                             {64, Algorithm::kUnfused, 1}};
  EXPECT_EQ(e->ranges, expected);
  TuningTable t;
  t.entries.push_back(*e);
  EXPECT_TRUE(validate_tuning_table(t).is_ok());
  EXPECT_EQ(t.lookup(kKey, 31)->algorithm, Algorithm::kTwoshot);  // between measured: the lower's
}

TEST(TuneEntry, RefusesSweepsATableCannotDescribe) {
  std::string why;
  EXPECT_FALSE(derive_entry({row(2, 1, 1, 1, 1)}, kKey, &why).has_value());
  EXPECT_NE(why.find("start at 1 token"), std::string::npos);
  Row bad = row(2, NAN, NAN, NAN, NAN);
  EXPECT_FALSE(derive_entry({row(1, 1, 1, 1, 1), bad}, kKey, &why).has_value());
  EXPECT_EQ(why, "no algorithm has a valid time at 2 tokens");
}

TEST(TuneFile, MergesEntriesOfOneMachineAndRefusesAnother) {
  const std::string path = testing::TempDir() + "arf_tune_merge.json";
  std::remove(path.c_str());
  std::string why;
  TuningEntry a = *derive_entry({row(1, 1, 2, 3, 4)}, kKey, &why);
  TuningKey k4 = kKey;
  k4.world = 4;
  TuningEntry b = *derive_entry({row(1, 4, 3, 2, 1)}, k4, &why);
  ASSERT_EQ(write_tuned_entry(path, a, "NVIDIA H200", "d1", "c1"), "");
  ASSERT_EQ(write_tuned_entry(path, b, "NVIDIA H200", "d2", "c2"), "");
  a.ranges[0].algorithm = Algorithm::kTwoshot;  // re-measured: replaces the entry of its key
  ASSERT_EQ(write_tuned_entry(path, a, "NVIDIA H200", "d3", "c3"), "");
  Result<std::string> text = read_tuning_table_file(path);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  Result<TuningTable> t = parse_tuning_table(text.value());
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t.value().entries.size(), 2u);
  EXPECT_EQ(t.value().entries[0], a);
  EXPECT_EQ(t.value().entries[1], b);
  EXPECT_EQ(t.value().date, "d3");
  EXPECT_EQ(t.value().commit, "c3");
  why = write_tuned_entry(path, a, "NVIDIA H100", "d4", "c4");
  EXPECT_NE(why.find("measured on \"NVIDIA H200\", this run is on \"NVIDIA H100\""),
            std::string::npos)
      << why;
  std::ofstream(path) << "{ not a table";
  why = write_tuned_entry(path, a, "NVIDIA H200", "d5", "c5");
  EXPECT_NE(why.find("exists but is not a valid table"), std::string::npos) << why;
  std::remove(path.c_str());
}

TEST(TuneSummary, StatesTheGoal) {
  std::string why;
  std::vector<Row> rows = {row(1, 10, 12, 11, 20, 10.2), row(2, 10, 12, 11, 20, 10.1)};
  TuningEntry e = *derive_entry(rows, kKey, &why);
  std::string s = tune_summary(rows, e, "t.json");
  EXPECT_NE(s.find("#   tokens 1..2: oneshot_lamport"), std::string::npos) << s;
  EXPECT_NE(s.find("worst 2.00% (goal <= 3%), never slower than unfused: GOAL MET"),
            std::string::npos)
      << s;
  rows[1] = row(2, 10, 12, 11, 20, 21, "twoshot");
  e = *derive_entry(rows, kKey, &why);
  s = tune_summary(rows, e, "t.json");
  EXPECT_NE(s.find("SLOWER THAN UNFUSED"), std::string::npos) << s;
  EXPECT_NE(s.find("goal NOT met"), std::string::npos) << s;
}


// ---- --op quant ----

TEST(TuneArgs, QuantNeedsOneVariantAndOneHidden) {
  std::string err;
  std::optional<BenchArgs> a = parse({"--op", "quant", "--quant", "fp8_token", "--hidden", "8192",
                                      "--tune-out", "t.json", "--tokens", "1,2,4"}, &err);
  ASSERT_TRUE(a.has_value()) << err;
  EXPECT_FALSE(parse({"--op", "quant", "--tune-out", "t.json", "--tokens", "1,2,4"}, &err));
  EXPECT_NE(err.find("exactly one --quant variant"), std::string::npos) << err;
  EXPECT_FALSE(parse({"--op", "quant", "--quant", "fp8_token", "--hidden", "4096,8192",
                      "--tune-out", "t.json", "--tokens", "1,2"}, &err));
  EXPECT_NE(err.find("exactly one --quant variant"), std::string::npos) << err;
}

// One quant row: the four columns of kQuantColumns, as a fused algorithm `algo` at levels 1 and 2
// and as unfused with inner `algo` at level 3.
Row quant_row(int64_t tokens, double three, double two, double one,
              const std::string& algo = "oneshot_lamport") {
  Row r;
  r.tokens = tokens;
  r.row_elems = 8192;
  r.variant = "fp8_token";
  Cell c3 = cell("3_kernels", three);
  c3.chosen = algo == "nccl" ? "nccl" : "unfused";
  c3.inner = algo;
  Cell c2 = cell("2_kernels", two);
  c2.chosen = c2.inner = algo;
  Cell c1 = cell("1_kernel", one);
  c1.chosen = c1.inner = algo;
  Cell side = cell("1_kernel+bf16", 0.001);  // fastest, but another output contract
  side.chosen = side.inner = algo;
  r.cells = {c3, c2, c1, side};
  return r;
}

const TuningKey kQuantKey{8, RankSharing::kOnePerDevice, DType::kBf16, TuningGroup::kQuant, 8192};

TEST(TuneQuant, LevelsAndAlgorithmsBecomeRanges) {
  const std::vector<Row> rows = {
      quant_row(1, 30, 20, 10),                   // level 1
      quant_row(2, 30, 20, 10.05),                // level 1 (tie within 1% -> fewer kernels)
      quant_row(4, 30, 10, 10.2),                 // level 2
      quant_row(64, 12, 20, 15, "twoshot"),       // level 3, inner twoshot
      quant_row(512, 12, 20, 15, "nccl")};        // nccl stays nccl at level 3
  std::string why;
  const std::optional<TuningEntry> e = derive_quant_entry(rows, kQuantKey, &why);
  ASSERT_TRUE(e.has_value()) << why;
  const std::vector<TuningRange> expected = {{1, Algorithm::kOneshotLamport, 1},
                                             {4, Algorithm::kOneshotLamport, 2},
                                             {64, Algorithm::kTwoshot, 3},
                                             {512, Algorithm::kNccl, 3}};
  EXPECT_EQ(e->ranges, expected);
  EXPECT_EQ(e->max_tokens, 512);
  TuningTable table;
  table.machine = "m";
  table.entries.push_back(*e);
  EXPECT_TRUE(validate_tuning_table(table).is_ok()) << validate_tuning_table(table).message();
  const std::string summary = tune_summary(rows, *e, "t.json");
  EXPECT_NE(summary.find("tokens 64..511: twoshot at level 3"), std::string::npos) << summary;
}

TEST(TuneQuant, RefusesMixedVariantsAndRowsWithoutAValidLevel) {
  std::vector<Row> rows = {quant_row(1, 30, 20, 10), quant_row(2, 30, 20, 10)};
  rows[1].variant = "nvfp4";
  std::string why;
  EXPECT_FALSE(derive_quant_entry(rows, kQuantKey, &why).has_value());
  EXPECT_NE(why.find("one quant variant"), std::string::npos) << why;
  rows = {quant_row(1, 30, 20, 10)};
  for (Cell& c : rows[0].cells) c.wrong = 1;
  EXPECT_FALSE(derive_quant_entry(rows, kQuantKey, &why).has_value());
  EXPECT_NE(why.find("no fallback level has a valid time at 1 tokens"), std::string::npos) << why;
}

}  // namespace
}  // namespace arf::bench
