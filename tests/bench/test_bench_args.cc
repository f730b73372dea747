// arfusion-bench's command line (bench/args.h): the nccl-tests flags (-b -e -f -n -w -c -G -d -J)
// keep their nccl-tests meaning, the fused-op axes (--op, -a, --tokens, --devices/--nranks) parse
// and reject as documented, and running with no flags is exactly the README's main job. Pure host
// code: parse_args touches no CUDA, so this suite runs on machines without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "timing.h"

namespace arf::bench {
namespace {

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// Owns argv storage for one parse_args call; argv[0] is the program name, as in main().
struct ParseResult {
  std::optional<BenchArgs> args;
  int exit_code = -1;
  std::string stderr_text;
};

ParseResult parse(std::initializer_list<std::string> flags) {
  std::vector<std::string> words = {"arfusion-bench"};
  words.insert(words.end(), flags);
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ParseResult result;
  // CLI11 reports errors on stderr; capture it so rejections can be checked for their reason.
  testing::internal::CaptureStderr();
  result.args = parse_args(static_cast<int>(words.size()), argv.data(), &result.exit_code);
  result.stderr_text = testing::internal::GetCapturedStderr();
  return result;
}

// Parses flags that must be accepted; fails the test (with CLI11's message) otherwise.
BenchArgs parse_ok(std::initializer_list<std::string> flags) {
  ParseResult r = parse(flags);
  EXPECT_TRUE(r.args.has_value()) << r.stderr_text;
  return r.args.value_or(BenchArgs{});
}

// Parses flags that must be rejected with a non-zero exit code and `reason` in the message.
void expect_rejected(std::initializer_list<std::string> flags, const std::string& reason = "") {
  ParseResult r = parse(flags);
  EXPECT_FALSE(r.args.has_value());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_text.find(reason), std::string::npos)
      << "expected '" << reason << "' in: " << r.stderr_text;
}

std::vector<int64_t> powers_of_two(int64_t from, int64_t to) {
  std::vector<int64_t> v;
  for (int64_t t = from; t <= to; t *= 2) v.push_back(t);
  return v;
}

// ---- defaults: the README's main job (`bash scripts/bench.sh` runs the bench with no flags) ----

TEST(BenchArgs, DefaultsAreTheMainJob) {
  const BenchArgs a = parse_ok({});
  EXPECT_EQ(a.op, Op::kFused);
  EXPECT_EQ(a.hidden, 8192);
  EXPECT_EQ(a.dtype, arfBFloat16);
  EXPECT_EQ(a.tokens, powers_of_two(1, 4096));
  EXPECT_EQ(a.graph_replays, 1);
  EXPECT_EQ(a.check, 1);
  EXPECT_EQ(a.iters, 20);
  EXPECT_EQ(a.warmup_iters, 5);
  EXPECT_EQ(a.algos, (std::vector<arfAlgorithm_t>{arfAlgoOneshotLamport, arfAlgoOneshotPull,
                                                  arfAlgoTwoshot, arfAlgoUnfused, arfAlgoAuto}));
  EXPECT_TRUE(a.devices.empty());  // all visible GPUs, resolved later (devices.h)
  EXPECT_EQ(a.num_ranks, 0);
  EXPECT_EQ(a.max_tokens, 0);
  EXPECT_TRUE(a.json_path.empty());
  EXPECT_FALSE(a.dry_run);
  EXPECT_FALSE(a.input_buffer);  // inputs in the bench's own buffers, copied in where pull copies
  EXPECT_EQ(a.min_bytes, kKiB);
  EXPECT_EQ(a.max_bytes, 64 * kMiB);
  EXPECT_EQ(a.step_factor, 2);
  EXPECT_EQ(a.command_line, "arfusion-bench");
}

TEST(BenchArgs, HelpExitsZero) {
  ParseResult r = parse({"--help"});
  EXPECT_FALSE(r.args.has_value());
  EXPECT_EQ(r.exit_code, 0);
}

// ---- sizes: -b -e -f as nccl-tests, binary K/M/G suffixes ----------------------------------

TEST(BenchArgs, SizeSuffixesAreBinary) {
  BenchArgs a = parse_ok({"--op", "allreduce", "-b", "8K", "-e", "256M", "-f", "4"});
  EXPECT_EQ(a.op, Op::kAllReduce);
  EXPECT_EQ(a.min_bytes, 8 * kKiB);
  EXPECT_EQ(a.max_bytes, 256 * kMiB);
  EXPECT_EQ(a.step_factor, 4);

  a = parse_ok({"-b", "512", "-e", "1G"});
  EXPECT_EQ(a.min_bytes, 512);
  EXPECT_EQ(a.max_bytes, kGiB);

  // Long spellings and lower case mean the same (nccl-tests users type both).
  a = parse_ok({"--minbytes", "4k", "--maxbytes", "2m", "--stepfactor", "8"});
  EXPECT_EQ(a.min_bytes, 4 * kKiB);
  EXPECT_EQ(a.max_bytes, 2 * kMiB);
  EXPECT_EQ(a.step_factor, 8);
}

TEST(BenchArgs, SizesRejected) {
  expect_rejected({"-b", "1M", "-e", "1K"}, "minbytes <= maxbytes");
  expect_rejected({"-b", "0"}, "minbytes");
  expect_rejected({"-f", "1"}, "--stepfactor");  // a factor of 1 would never end the sweep
  expect_rejected({"-b", "12Q"}, "unit not recognized");
}

TEST(BenchArgs, AllreduceCountsFollowTheByteSweep) {
  // bf16: 1 KiB = 512 elements; each row multiplies the bytes by -f.
  const BenchArgs a = parse_ok({"--op", "allreduce", "-b", "1K", "-e", "8K", "-f", "2"});
  EXPECT_EQ(allreduce_counts(a), (std::vector<int64_t>{512, 1024, 2048, 4096}));
  // Below one 16-byte vector the count is rounded up to 8 elements, and repeats are dropped.
  const BenchArgs tiny = parse_ok({"--op", "allreduce", "-b", "2", "-e", "16"});
  EXPECT_EQ(allreduce_counts(tiny), (std::vector<int64_t>{8}));
  EXPECT_EQ(allreduce_row_elems(4096, 8192), 4096);
  EXPECT_EQ(allreduce_row_elems(3 * 8192, 8192), 8192);
  EXPECT_EQ(allreduce_row_elems(24, 16), 8);  // 16 does not divide 24
}

// ---- run options: -n -w -c -G -d -J ---------------------------------------------------------

TEST(BenchArgs, RunOptions) {
  BenchArgs a =
      parse_ok({"-n", "100", "-w", "0", "-c", "0", "-G", "0", "-d", "fp16", "-J", "/tmp/out.json"});
  EXPECT_EQ(a.iters, 100);
  EXPECT_EQ(a.warmup_iters, 0);
  EXPECT_EQ(a.check, 0);
  EXPECT_EQ(a.graph_replays, 0);
  EXPECT_EQ(a.dtype, arfFloat16);
  EXPECT_EQ(a.json_path, "/tmp/out.json");

  a = parse_ok({"--iters", "7", "--warmup_iters", "2", "--check", "1", "--cudagraph", "10",
                "--datatype", "bf16", "--json", "x.json"});
  EXPECT_EQ(a.iters, 7);
  EXPECT_EQ(a.warmup_iters, 2);
  EXPECT_EQ(a.check, 1);
  EXPECT_EQ(a.graph_replays, 10);
  EXPECT_EQ(a.dtype, arfBFloat16);
  EXPECT_EQ(a.json_path, "x.json");
  EXPECT_EQ(a.repeats, 1);  // one timed region per cell unless asked
  EXPECT_EQ(parse_ok({"--repeats", "5"}).repeats, 5);
  EXPECT_EQ(parse_ok({"-R", "3"}).repeats, 3);
  EXPECT_TRUE(parse_ok({"--input-buffer"}).input_buffer);
}

// A cell's time over several timed regions is their median.
TEST(BenchTiming, MedianOfRepeats) {
  EXPECT_TRUE(std::isnan(median({})));
  EXPECT_DOUBLE_EQ(median({4.0}), 4.0);
  EXPECT_DOUBLE_EQ(median({9.0, 1.0, 5.0}), 5.0);
  EXPECT_DOUBLE_EQ(median({2.0, 8.0, 4.0, 6.0}), 5.0);
  EXPECT_DOUBLE_EQ(median({3.0, 3.0, 100.0}), 3.0);  // one slow region does not move it
}

TEST(BenchArgs, DatatypeAcceptsNcclTestsSpellings) {
  EXPECT_EQ(parse_ok({"-d", "bfloat16"}).dtype, arfBFloat16);
  EXPECT_EQ(parse_ok({"-d", "half"}).dtype, arfFloat16);
  expect_rejected({"-d", "fp32"}, "--datatype");  // fp32 is only a gamma dtype
  expect_rejected({"-d", "float"}, "--datatype");
}

TEST(BenchArgs, RunOptionsRejected) {
  expect_rejected({"-n", "0"}, "--iters");
  expect_rejected({"-w", "-1"}, "--warmup_iters");
  expect_rejected({"-c", "2"}, "--check");
  expect_rejected({"-G", "-1"}, "--cudagraph");
  expect_rejected({"-R", "0"}, "--repeats");
  expect_rejected({"--max-tokens", "-4"}, "--max-tokens");
  expect_rejected({"--no-such-flag"}, "--no-such-flag");
}

// ---- fused-op axes --------------------------------------------------------------------------

TEST(BenchArgs, Ops) {
  EXPECT_EQ(parse_ok({"--op", "fused"}).op, Op::kFused);
  EXPECT_EQ(parse_ok({"--op", "allreduce"}).op, Op::kAllReduce);
  EXPECT_EQ(parse_ok({"--op", "epilogue"}).op, Op::kEpilogue);
  expect_rejected({"--op", "reduce_scatter"}, "--op");
  EXPECT_STREQ(op_name(Op::kAllReduce), "allreduce");
  EXPECT_STREQ(op_name(Op::kFused), "fused");
  EXPECT_STREQ(op_name(Op::kEpilogue), "epilogue");
}

TEST(BenchArgs, AlgorithmListKeepsOrderAndDropsRepeats) {
  BenchArgs a = parse_ok({"-a", "twoshot,oneshot_lamport,twoshot"});
  EXPECT_EQ(a.algos, (std::vector<arfAlgorithm_t>{arfAlgoTwoshot, arfAlgoOneshotLamport}));
  a = parse_ok({"--algos", "auto"});
  EXPECT_EQ(a.algos, (std::vector<arfAlgorithm_t>{arfAlgoAuto}));
  // Empty items between commas are ignored rather than treated as a name.
  a = parse_ok({"-a", "unfused,,oneshot_pull,"});
  EXPECT_EQ(a.algos, (std::vector<arfAlgorithm_t>{arfAlgoUnfused, arfAlgoOneshotPull}));
}

TEST(BenchArgs, AlgorithmNamesAreTheLibrarys) {
  // Every name the library prints is accepted by -a (one spelling everywhere).
  for (int i = arfAlgoAuto; i <= arfAlgoNccl; ++i) {
    const auto algo = static_cast<arfAlgorithm_t>(i);
    const BenchArgs a = parse_ok({"-a", arfAlgorithmName(algo)});
    EXPECT_EQ(a.algos, std::vector<arfAlgorithm_t>{algo}) << arfAlgorithmName(algo);
  }
}

TEST(BenchArgs, UnknownAlgorithmRejected) {
  expect_rejected({"-a", "oneshot"}, "unknown algorithm 'oneshot'");
  expect_rejected({"-a", "twoshot,two_shot"}, "unknown algorithm 'two_shot'");
  expect_rejected({"-a", "Auto"}, "unknown algorithm 'Auto'");  // names are case-sensitive
  expect_rejected({"-a", ","}, "at least one algorithm");
}

TEST(BenchArgs, TokenList) {
  BenchArgs a = parse_ok({"--tokens", "1,3,100,4096"});
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{1, 3, 100, 4096}));
  a = parse_ok({"--tokens", "7"});
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{7}));
  // --tokens wins over the power-of-two sweep.
  a = parse_ok({"--tokens", "5,6", "--tmin", "2", "--tmax", "64"});
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{5, 6}));
  a = parse_ok({"--tmin", "4", "--tmax", "32"});
  EXPECT_EQ(a.tokens, powers_of_two(4, 32));
  a = parse_ok({"--tmin", "3", "--tmax", "20"});
  EXPECT_EQ(a.tokens, (std::vector<int64_t>{3, 6, 12}));
}

TEST(BenchArgs, TokensRejected) {
  expect_rejected({"--tokens", "4,0"}, ">= 1");
  expect_rejected({"--tokens", "4,x"}, "--tokens");
  expect_rejected({"--tmin", "8", "--tmax", "4"}, "tmin <= tmax");
  expect_rejected({"--tmin", "0"}, "tmin <= tmax");
}

TEST(BenchArgs, Hidden) {
  EXPECT_EQ(parse_ok({"--hidden", "4096"}).hidden, 4096);
  EXPECT_EQ(parse_ok({"--hidden", "8"}).hidden, 8);
  expect_rejected({"--hidden", "12"}, "multiple of 8");
  expect_rejected({"--hidden", "0"}, "multiple of 8");
}

TEST(BenchArgs, DevicesOrRankCount) {
  BenchArgs a = parse_ok({"--devices", "0,0,1,1"});
  EXPECT_EQ(a.devices, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(a.num_ranks, 0);
  a = parse_ok({"--nranks", "4"});
  EXPECT_EQ(a.num_ranks, 4);
  EXPECT_TRUE(a.devices.empty());
  a = parse_ok({"--nranks", "8"});
  EXPECT_EQ(a.num_ranks, ARF_MAX_RANKS);
}

TEST(BenchArgs, DevicesExcludeRankCount) {
  expect_rejected({"--devices", "0,1", "--nranks", "2"}, "excludes");
  expect_rejected({"--nranks", "2", "--devices", "0,1"}, "excludes");
  expect_rejected({"--nranks", "0"}, "not in range 1 to 8");
  expect_rejected({"--nranks", "9"}, "not in range 1 to 8");  // more than ARF_MAX_RANKS
}

TEST(BenchArgs, DryRunAndCapacity) {
  BenchArgs a = parse_ok({"--dry-run", "--max-tokens", "8192"});
  EXPECT_TRUE(a.dry_run);
  EXPECT_EQ(a.max_tokens, 8192);
  EXPECT_EQ(a.command_line, "arfusion-bench --dry-run --max-tokens 8192");
}

// ---- --op quant: the fallback chain (3 vs 2 vs 1 kernels) per quant pattern ----

using V = QuantVariant;
constexpr arfPattern_t kTensor = arfPatternResidualRmsNormFp8PerTensor;
constexpr arfPattern_t kToken = arfPatternResidualRmsNormFp8PerToken;
constexpr arfPattern_t kGroup = arfPatternResidualRmsNormFp8PerGroup;
constexpr arfPattern_t kNvfp4 = arfPatternResidualRmsNormNvfp4;
constexpr arfPattern_t kMxfp4 = arfPatternResidualRmsNormMxfp4;

TEST(BenchQuantArgs, DefaultsAreEveryPatternRowMajorFp32) {
  const BenchArgs a = parse_ok({"--op", "quant"});
  EXPECT_EQ(a.op, Op::kQuant);
  EXPECT_STREQ(op_name(a.op), "quant");
  EXPECT_EQ(a.tokens, powers_of_two(1, 4096));
  EXPECT_EQ(a.hiddens, (std::vector<int64_t>{8192}));
  EXPECT_EQ(a.hidden, 8192);
  EXPECT_EQ(a.graph_replays, 1);
  EXPECT_EQ(a.check, 1);
  EXPECT_EQ(a.quant, (std::vector<V>{{kTensor, arfScaleRowMajor, arfScaleFp32},
                                     {kToken, arfScaleRowMajor, arfScaleFp32},
                                     {kGroup, arfScaleRowMajor, arfScaleFp32},
                                     {kNvfp4, arfScaleRowMajor, arfScaleFp32},
                                     {kMxfp4, arfScaleRowMajor, arfScaleFp32}}));
  // Other ops resolve no quant variants.
  EXPECT_TRUE(parse_ok({}).quant.empty());
}

TEST(BenchQuantArgs, HiddenList) {
  const BenchArgs a = parse_ok({"--op", "quant", "--hidden", "7168,8192"});
  EXPECT_EQ(a.hiddens, (std::vector<int64_t>{7168, 8192}));
  EXPECT_EQ(a.hidden, 8192);  // buffers and gamma are sized for the largest
  EXPECT_EQ(parse_ok({"--hidden", "4096"}).hiddens, (std::vector<int64_t>{4096}));
  expect_rejected({"--hidden", "7168,8192"}, "needs --op quant");
  expect_rejected({"--op", "quant", "--hidden", "8192,12"}, "multiple of 8");
}

TEST(BenchQuantArgs, LayoutsAndFormatsApplyWhereTheApiDefinesThem) {
  const BenchArgs a =
      parse_ok({"--op", "quant", "--quant", "fp8_token,fp8_group,nvfp4", "--scale-layout",
                "row,mn,swizzled", "--scale-format", "fp32,ue8m0_packed"});
  EXPECT_EQ(a.quant, (std::vector<V>{{kToken, arfScaleRowMajor, arfScaleFp32},
                                     {kGroup, arfScaleRowMajor, arfScaleFp32},
                                     {kGroup, arfScaleRowMajor, arfScaleUe8m0Packed},
                                     {kGroup, arfScaleMnMajor, arfScaleFp32},
                                     {kGroup, arfScaleMnMajor, arfScaleUe8m0Packed},
                                     {kNvfp4, arfScaleRowMajor, arfScaleFp32},
                                     {kNvfp4, arfScaleSwizzled128x4, arfScaleFp32}}));
  const BenchArgs b = parse_ok(
      {"--op", "quant", "--quant", "mxfp4,fp8_group,mxfp4", "--scale-layout", "swizzled,mn"});
  EXPECT_EQ(b.quant, (std::vector<V>{{kMxfp4, arfScaleSwizzled128x4, arfScaleFp32},
                                     {kGroup, arfScaleMnMajor, arfScaleFp32}}));
  const BenchArgs c =
      parse_ok({"--op", "quant", "--quant", "fp8_group", "--scale-format", "ue8m0"});
  EXPECT_EQ(c.quant, (std::vector<V>{{kGroup, arfScaleRowMajor, arfScaleUe8m0AsFp32}}));
}

TEST(BenchQuantArgs, Labels) {
  EXPECT_EQ(quant_variant_label({kTensor, arfScaleRowMajor, arfScaleFp32}), "fp8_tensor");
  EXPECT_EQ(quant_variant_label({kToken, arfScaleRowMajor, arfScaleFp32}), "fp8_token");
  EXPECT_EQ(quant_variant_label({kGroup, arfScaleMnMajor, arfScaleUe8m0Packed}),
            "fp8_group/mn/ue8m0_packed");
  EXPECT_EQ(quant_variant_label({kNvfp4, arfScaleSwizzled128x4, arfScaleFp32}), "nvfp4/swizzled");
  EXPECT_EQ(quant_variant_label({kMxfp4, arfScaleRowMajor, arfScaleFp32}), "mxfp4/row");
}

TEST(BenchQuantArgs, UnknownNamesRejected) {
  expect_rejected({"--op", "quant", "--quant", "fp8"}, "unknown quant pattern 'fp8'");
  expect_rejected({"--op", "quant", "--quant", "nvfp4,FP8_GROUP"}, "'FP8_GROUP'");
  expect_rejected({"--op", "quant", "--scale-layout", "col"}, "unknown name 'col'");
  expect_rejected({"--op", "quant", "--scale-format", "e8m0"}, "unknown name 'e8m0'");
  expect_rejected({"--op", "quantize"}, "--op");
}

TEST(BenchQuantArgs, CombinationsRejected) {
  // A selected pattern that none of the listed layouts applies to.
  expect_rejected({"--op", "quant", "--quant", "fp8_group", "--scale-layout", "swizzled"},
                  "no listed layout applies to fp8_group");
  expect_rejected({"--op", "quant", "--quant", "nvfp4", "--scale-layout", "mn"},
                  "no listed layout applies to nvfp4");
  // Hidden sizes a selected format cannot take: the same rule validation states.
  expect_rejected({"--op", "quant", "--hidden", "2880"}, "fp8_group needs hidden % 128 == 0");
  expect_rejected({"--op", "quant", "--quant", "nvfp4", "--hidden", "2056"},
                  "nvfp4 needs hidden % 16 == 0");
  EXPECT_EQ(parse_ok({"--op", "quant", "--quant", "fp8_token,mxfp4", "--hidden", "2880"}).quant,
            (std::vector<V>{{kToken, arfScaleRowMajor, arfScaleFp32},
                            {kMxfp4, arfScaleRowMajor, arfScaleFp32}}));
  // Quant flags on another op would be ignored silently.
  expect_rejected({"--quant", "nvfp4"}, "only with --op quant");
  expect_rejected({"--op", "fused", "--scale-layout", "mn"}, "only with --op quant");
  expect_rejected({"--op", "epilogue", "--scale-format", "ue8m0"}, "only with --op quant");
}

TEST(BenchArgs, DtypeHelpers) {
  EXPECT_EQ(dtype_size(arfBFloat16), 2u);
  EXPECT_EQ(dtype_size(arfFloat16), 2u);
  EXPECT_EQ(dtype_size(arfFloat32), 4u);
  EXPECT_STREQ(dtype_name(arfBFloat16), "bf16");
  EXPECT_STREQ(dtype_name(arfFloat16), "fp16");
  EXPECT_STREQ(dtype_name(arfFloat32), "fp32");
}

}  // namespace
}  // namespace arf::bench
