// Validation of the quantized patterns (validate.h, quant_rules.h): hidden sizes per format, the
// quant_out / scale_out / scale_in pointers (required, alignment, extents in the overlap check),
// scale layouts and formats per pattern, the fallback level, and version-1 callers. Each rule is
// asserted with its status code AND a substring of the message. Pointers are fabricated addresses
// that are never dereferenced; device residency goes through an injected PointerCheck.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/quant_rules.h"
#include "core/validate.h"

namespace arf {
namespace {

constexpr int kTokens = 13;  // not a multiple of 4: MN-major scales are padded
constexpr int kHidden = 4096;

void* addr(uint64_t a) { return reinterpret_cast<void*>(static_cast<uintptr_t>(a)); }

constexpr uint64_t kInput = 0x10000000, kResidualIn = 0x20000000, kGamma = 0x30000000,
                   kResidualOut = 0x40000000, kNormOut = 0x50000000, kQuantOut = 0x60000000,
                   kScaleOut = 0x70000000, kScaleIn = 0x80000000;
constexpr uint64_t kForeignBase = 0x90000000;  // "memory of device 1" for the injected check

constexpr arfPattern_t kQuantPatterns[] = {
    arfPatternResidualRmsNormFp8PerTensor, arfPatternResidualRmsNormFp8PerToken,
    arfPatternResidualRmsNormFp8PerGroup, arfPatternResidualRmsNormNvfp4,
    arfPatternResidualRmsNormMxfp4};

class QuantValidate : public ::testing::Test {
 protected:
  QuantValidate() {
    facts_.world = 2;
    facts_.max_tokens = 256;
    facts_.max_hidden = 8192;
    facts_.oneshot_max_tokens = 256;
    arfFusedArgsInit(&args_);
    args_.pattern = arfPatternResidualRmsNormFp8PerToken;
    args_.num_tokens = kTokens;
    args_.hidden = kHidden;
    args_.input = addr(kInput);
    args_.residual_in = addr(kResidualIn);
    args_.gamma = addr(kGamma);
    args_.residual_out = addr(kResidualOut);
    args_.norm_out = addr(kNormOut);
    args_.quant_out = addr(kQuantOut);
    args_.scale_out = addr(kScaleOut);
    args_.scale_in = static_cast<const float*>(addr(kScaleIn));
    check_ = [](const void* p, const char* name, int) -> Status {
      if (reinterpret_cast<uintptr_t>(p) >= kForeignBase) {
        return invalid_argument(std::string(name) + " is memory of device 1");
      }
      return Status::ok();
    };
  }

  Status run() const { return validate(upgrade_fused_args(&args_), facts_, /*device=*/0, check_); }

  void expect_ok() const {
    const Status s = run();
    EXPECT_TRUE(s.is_ok()) << arfPatternName(args_.pattern) << ": " << s.message();
  }

  void expect_error(const std::string& substring, arfStatus_t code = arfInvalidArgument) const {
    const Status s = run();
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_NE(s.message().find(substring), std::string::npos)
        << "pattern " << arfPatternName(args_.pattern) << "\nmessage: " << s.message()
        << "\nexpected to contain: " << substring;
  }

  uint64_t quant_bytes() const {
    return static_cast<uint64_t>(
        quant_out_bytes(static_cast<Pattern>(args_.pattern), kTokens, kHidden));
  }
  uint64_t scale_bytes() const {
    return arfScaleBufferBytes(args_.pattern, args_.scale_layout, args_.scale_format, kTokens,
                               kHidden);
  }

  StaticFacts facts_;
  arfFusedArgs_t args_{};
  PointerCheck check_;
};

TEST_F(QuantValidate, EveryPatternWithAndWithoutNormOut) {
  for (arfPattern_t pattern : kQuantPatterns) {
    args_.pattern = pattern;
    args_.norm_out = addr(kNormOut);
    expect_ok();
    args_.norm_out = nullptr;  // the side output is optional for quantized patterns
    expect_ok();
    args_.norm_out = const_cast<void*>(args_.input);  // and may take input's place, as usual
    expect_ok();
  }
  args_.pattern = arfPatternResidualRmsNorm;
  args_.norm_out = nullptr;  // ... but not for residual_rmsnorm itself
  expect_error("norm_out is NULL (required by pattern residual_rmsnorm)");
}

TEST_F(QuantValidate, HiddenMultipleOfTheBlock) {
  args_.pattern = arfPatternResidualRmsNormFp8PerGroup;
  args_.hidden = 2880;
  expect_error(
      "pattern residual_rmsnorm_fp8_per_group needs hidden % 128 == 0 (one scale per "
      "1x128 group); hidden is 2880");
  args_.num_tokens = 0;  // shape rules hold for empty calls too
  expect_error("needs hidden % 128 == 0");
  args_.num_tokens = kTokens;
  args_.pattern = arfPatternResidualRmsNormNvfp4;
  expect_ok();  // 2880 = 180 x 16
  args_.hidden = 4104;
  expect_error("pattern residual_rmsnorm_nvfp4 needs hidden % 16 == 0");
  args_.pattern = arfPatternResidualRmsNormMxfp4;
  args_.hidden = 2880;  // 90 x 32
  expect_ok();
  args_.hidden = 2896;
  expect_error(
      "pattern residual_rmsnorm_mxfp4 needs hidden % 32 == 0 (one UE8M0 scale per 32 "
      "elements); hidden is 2896");
  for (arfPattern_t pattern :
       {arfPatternResidualRmsNormFp8PerTensor, arfPatternResidualRmsNormFp8PerToken}) {
    args_.pattern = pattern;
    args_.hidden = 4104;  // any multiple of 8
    expect_ok();
  }
}

TEST_F(QuantValidate, QuantOutRequiredAndAligned) {
  for (arfPattern_t pattern : kQuantPatterns) {
    args_.pattern = pattern;
    args_.quant_out = nullptr;
    expect_error(std::string("quant_out is NULL (required by pattern ") + arfPatternName(pattern));
    args_.quant_out = addr(kQuantOut + 8);
    expect_error("quant_out 0x60000008 is not 16-byte aligned");
    args_.quant_out = addr(kQuantOut);
  }
}

TEST_F(QuantValidate, ScaleOutWhereThePatternWritesScales) {
  for (arfPattern_t pattern : kQuantPatterns) {
    args_.pattern = pattern;
    args_.scale_out = nullptr;
    if (pattern == arfPatternResidualRmsNormFp8PerTensor) {
      expect_ok();  // no scales to write: scale_out is ignored, whatever it holds
      args_.scale_out = addr(kScaleOut + 4);
      expect_ok();
    } else {
      expect_error(std::string("scale_out is NULL (required by pattern ") +
                   arfPatternName(pattern));
      args_.scale_out = addr(kScaleOut + 4);
      expect_error("scale_out 0x70000004 is not 16-byte aligned");
    }
    args_.scale_out = addr(kScaleOut);
  }
}

TEST_F(QuantValidate, ScaleInForPerTensorAndNvfp4) {
  for (arfPattern_t pattern : kQuantPatterns) {
    args_.pattern = pattern;
    const bool reads = pattern == arfPatternResidualRmsNormFp8PerTensor ||
                       pattern == arfPatternResidualRmsNormNvfp4;
    args_.scale_in = nullptr;
    if (!reads) {
      expect_ok();
      continue;
    }
    expect_error(std::string("scale_in is NULL (required by pattern ") + arfPatternName(pattern));
    args_.scale_in = static_cast<const float*>(addr(kScaleIn + 2));
    expect_error("scale_in 0x80000002 is not 4-byte aligned (an fp32 scalar)");
    args_.scale_in = static_cast<const float*>(addr(kScaleIn + 4));  // a float needs 4 only
    expect_ok();
    args_.scale_in = static_cast<const float*>(addr(kForeignBase));
    expect_error("scale_in is memory of device 1");
    args_.scale_in = static_cast<const float*>(addr(kScaleIn));
  }
}

TEST_F(QuantValidate, ScaleLayoutsPerPattern) {
  struct Case {
    arfPattern_t pattern;
    arfScaleLayout_t layout;
    const char* error;  // "" = legal
  };
  const Case cases[] = {
      {arfPatternResidualRmsNormFp8PerTensor, arfScaleMnMajor, "MN-major is for fp8 per-group"},
      {arfPatternResidualRmsNormFp8PerTensor, arfScaleSwizzled128x4, "is for nvfp4 and mxfp4"},
      {arfPatternResidualRmsNormFp8PerToken, arfScaleRowMajor, ""},
      {arfPatternResidualRmsNormFp8PerToken, arfScaleMnMajor,
       "scale_layout MN-major is for fp8 per-group only, not for pattern "
       "residual_rmsnorm_fp8_per_token"},
      {arfPatternResidualRmsNormFp8PerToken, arfScaleSwizzled128x4, "is for nvfp4 and mxfp4"},
      {arfPatternResidualRmsNormFp8PerGroup, arfScaleRowMajor, ""},
      {arfPatternResidualRmsNormFp8PerGroup, arfScaleMnMajor, ""},
      {arfPatternResidualRmsNormFp8PerGroup, arfScaleSwizzled128x4,
       "scale_layout 128x4-swizzled is for nvfp4 and mxfp4 only, not for pattern "
       "residual_rmsnorm_fp8_per_group"},
      {arfPatternResidualRmsNormNvfp4, arfScaleRowMajor, ""},
      {arfPatternResidualRmsNormNvfp4, arfScaleSwizzled128x4, ""},
      {arfPatternResidualRmsNormNvfp4, arfScaleMnMajor, "MN-major is for fp8 per-group only"},
      {arfPatternResidualRmsNormMxfp4, arfScaleSwizzled128x4, ""},
      {arfPatternResidualRmsNormMxfp4, arfScaleMnMajor, "MN-major is for fp8 per-group only"},
  };
  for (const Case& c : cases) {
    args_.pattern = c.pattern;
    args_.scale_layout = c.layout;
    if (*c.error == '\0') {
      expect_ok();
    } else {
      expect_error(c.error);
    }
  }
  args_.scale_layout = static_cast<arfScaleLayout_t>(9);
  expect_error("scale_layout 9 is not a valid arfScaleLayout_t");
  args_.pattern = arfPatternResidualRmsNorm;  // unused by unquantized patterns: ignored
  expect_ok();
}

TEST_F(QuantValidate, ScaleFormatsOnlyForPerGroup) {
  args_.pattern = arfPatternResidualRmsNormFp8PerGroup;
  for (arfScaleLayout_t layout : {arfScaleRowMajor, arfScaleMnMajor}) {
    for (arfScaleFormat_t format : {arfScaleFp32, arfScaleUe8m0AsFp32, arfScaleUe8m0Packed}) {
      args_.scale_layout = layout;
      args_.scale_format = format;
      expect_ok();
    }
  }
  args_.scale_layout = arfScaleRowMajor;
  args_.scale_format = static_cast<arfScaleFormat_t>(5);
  expect_error("scale_format 5 is not a valid arfScaleFormat_t");
  args_.scale_format = arfScaleUe8m0Packed;
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  expect_error(
      "scale_format 2 applies to fp8 per-group only; leave it arfScaleFp32 for pattern "
      "residual_rmsnorm_fp8_per_token");
  args_.pattern = arfPatternResidualRmsNormNvfp4;
  expect_error("(its scales are always one-byte codes)");
  args_.pattern = arfPatternResidualRmsNormMxfp4;
  args_.scale_format = arfScaleUe8m0AsFp32;
  expect_error("applies to fp8 per-group only");
  args_.pattern = arfPatternResidualRmsNormFp8PerTensor;
  expect_error("applies to fp8 per-group only");
}

TEST_F(QuantValidate, QuantOutExtentInTheOverlapCheck) {
  for (arfPattern_t pattern : kQuantPatterns) {
    args_.pattern = pattern;
    // fp8: T*H bytes; fp4: T*H/2. Adjacent is fine, one vector less overlaps.
    const uint64_t bytes = quant_bytes();
    EXPECT_EQ(bytes, (pattern == arfPatternResidualRmsNormNvfp4 ||
                      pattern == arfPatternResidualRmsNormMxfp4)
                         ? uint64_t{kTokens} * kHidden / 2
                         : uint64_t{kTokens} * kHidden);
    args_.quant_out = addr(kResidualOut - bytes);
    expect_ok();
    args_.quant_out = addr(kResidualOut - bytes + 16);
    expect_error("illegal aliasing: residual_out [0x40000000");
    expect_error("overlaps quant_out");
    args_.quant_out = addr(kQuantOut);
  }
}

TEST_F(QuantValidate, ScaleOutExtentIsThePaddedBuffer) {
  args_.pattern = arfPatternResidualRmsNormFp8PerGroup;
  args_.scale_layout = arfScaleMnMajor;
  // 32 groups x round_up(13, 4) = 16 tokens x 4 bytes: the padding belongs to the buffer.
  ASSERT_EQ(scale_bytes(), 32u * 16 * 4);
  args_.quant_out = addr(kScaleOut + scale_bytes());
  expect_ok();
  args_.quant_out = addr(kScaleOut + uint64_t{32} * 13 * 4);  // past the last valid scale only
  expect_error("overlaps scale_out [0x70000000, +2048 bytes)");
  args_.quant_out = addr(kQuantOut);
  // nvfp4 swizzled: 128 padded rows x 256 scale columns.
  args_.pattern = arfPatternResidualRmsNormNvfp4;
  args_.scale_layout = arfScaleSwizzled128x4;
  ASSERT_EQ(scale_bytes(), 128u * 256);
  args_.residual_out = addr(kScaleOut + scale_bytes() - 16);
  expect_error("overlaps scale_out [0x70000000, +32768 bytes)");
}

TEST_F(QuantValidate, QuantTensorsAliasNothing) {
  args_.pattern = arfPatternResidualRmsNormNvfp4;
  args_.quant_out = args_.norm_out;
  expect_error("illegal aliasing");
  args_.quant_out = const_cast<void*>(args_.input);  // not an in-place form: layouts differ
  expect_error("overlaps input");
  args_.quant_out = addr(kQuantOut);
  args_.scale_out = addr(kQuantOut);
  expect_error("overlaps");
  args_.scale_out = addr(kScaleOut);
  args_.scale_in =
      static_cast<const float*>(addr(kQuantOut + 64));  // read while quant_out is written
  expect_error("quant_out [0x60000000, +26624 bytes) overlaps scale_in");
  args_.scale_in = static_cast<const float*>(args_.gamma);  // inputs may share memory
  expect_ok();
}

TEST_F(QuantValidate, PointerCheckCoversTheQuantTensors) {
  std::vector<std::string> names;
  check_ = [&names](const void*, const char* name, int) {
    names.push_back(name);
    return Status::ok();
  };
  args_.pattern = arfPatternResidualRmsNormNvfp4;
  args_.norm_out = nullptr;
  ASSERT_TRUE(run().is_ok());
  EXPECT_EQ(names, (std::vector<std::string>{"input", "residual_in", "gamma", "residual_out",
                                             "quant_out", "scale_out", "scale_in"}));
  names.clear();
  args_.pattern = arfPatternResidualRmsNormFp8PerTensor;
  args_.norm_out = addr(kNormOut);
  ASSERT_TRUE(run().is_ok());
  EXPECT_EQ(names, (std::vector<std::string>{"input", "residual_in", "gamma", "residual_out",
                                             "norm_out", "quant_out", "scale_in"}));
  args_.quant_out = addr(kForeignBase);
  check_ = [](const void* p, const char* name, int) -> Status {
    if (reinterpret_cast<uintptr_t>(p) >= kForeignBase) {
      return invalid_argument(std::string(name) + " is memory of device 1");
    }
    return Status::ok();
  };
  expect_error("quant_out is memory of device 1");
}

TEST_F(QuantValidate, FallbackLevelRule) {
  for (arfFallbackLevel_t level :
       {arfFallbackAuto, arfFallbackOneKernel, arfFallbackTwoKernels, arfFallbackThreeKernels}) {
    args_.fallback = level;
    for (arfPattern_t pattern : kQuantPatterns) {
      args_.pattern = pattern;
      expect_ok();  // unfused + level 1/2 is the planner's arfUnsupported, not a malformed call
    }
    for (arfPattern_t pattern : {arfPatternAllReduce, arfPatternResidualRmsNorm}) {
      args_.pattern = pattern;
      args_.allreduce_out = addr(kNormOut + 0x1000000);
      if (level == arfFallbackAuto) {
        expect_ok();
      } else {
        expect_error(std::string("args->fallback ") + std::to_string(level) +
                     " applies to quantized patterns only; pattern " + arfPatternName(pattern) +
                     " takes arfFallbackAuto");
      }
    }
  }
  args_.pattern = arfPatternResidualRmsNormMxfp4;
  args_.fallback = static_cast<arfFallbackLevel_t>(4);
  expect_error("args->fallback 4 is not a valid arfFallbackLevel_t");
  args_.num_tokens = 0;
  expect_error("is not a valid arfFallbackLevel_t");
}

TEST_F(QuantValidate, PatternRange) {
  args_.pattern = static_cast<arfPattern_t>(7);
  expect_error("args->pattern 7 is not a valid arfPattern_t");
  args_.pattern = static_cast<arfPattern_t>(-1);
  expect_error("args->pattern -1 is not a valid arfPattern_t");
}

// A version-1 caller: its struct ends at eps. Bytes past it are not the caller's: validation must
// neither read them as fields nor let a quantized pattern through.
TEST_F(QuantValidate, VersionOneCallers) {
  EXPECT_EQ(kFusedArgsV1Bytes, offsetof(arfFusedArgs_t, eps) + sizeof(float) + 4);
  args_.pattern = arfPatternResidualRmsNorm;
  args_.struct_size = kFusedArgsV1Bytes;
  args_.version = 1;
  args_.fallback = arfFallbackThreeKernels;  // beyond the v1 struct: must read as auto
  args_.scale_layout = static_cast<arfScaleLayout_t>(9);
  expect_ok();
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  expect_error(
      "pattern residual_rmsnorm_fp8_per_token needs the quantization fields of API "
      "version 2, but args is a version 1 struct");
  args_.pattern = arfPatternResidualRmsNorm;
  args_.version = 2;
  expect_error("args->version 2 does not match args->struct_size");
  args_.struct_size = sizeof(arfFusedArgs_t);
  args_.version = 1;
  expect_error("args->version 1 does not match args->struct_size");
  args_.struct_size = kFusedArgsV1Bytes + 8;
  expect_error("args->struct_size is");
}

// A version 2 or 3 caller: its struct ends at `fallback`; norm_rounding (version 4) reads as
// arfNormRoundOnce whatever lies past it.
TEST_F(QuantValidate, VersionTwoAndThreeCallers) {
  EXPECT_EQ(kFusedArgsV2Bytes, offsetof(arfFusedArgs_t, fallback) + sizeof(arfFallbackLevel_t));
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  args_.struct_size = kFusedArgsV2Bytes;
  args_.norm_rounding = static_cast<arfNormRounding_t>(7);  // beyond the v2 struct: ignored
  for (unsigned v : {2u, 3u}) {
    args_.version = v;
    expect_ok();
  }
  args_.version = 4;
  expect_error("args->version 4 does not match args->struct_size");
  args_.struct_size = sizeof(arfFusedArgs_t);
  args_.version = 3;
  expect_error("args->version 3 does not match args->struct_size");
  args_.version = ARF_API_VERSION;
  expect_error("norm_rounding 7 is not a valid arfNormRounding_t");
  args_.norm_rounding = arfNormRoundBeforeWeight;
  expect_ok();
  std::vector<unsigned char> v2(kFusedArgsV2Bytes);
  args_.struct_size = kFusedArgsV2Bytes;
  args_.version = 3;
  args_.norm_rounding = arfNormRoundBeforeWeight;
  std::memcpy(v2.data(), &args_, kFusedArgsV2Bytes);
  const arfFusedArgs_t up =
      upgrade_fused_args(reinterpret_cast<const arfFusedArgs_t*>(v2.data())).get();
  EXPECT_EQ(up.norm_rounding, arfNormRoundOnce);
  EXPECT_EQ(up.fallback, args_.fallback);
}

// A version 4 caller: its struct ends at norm_rounding, which it has; scale_rule (version 5)
// reads as arfFp8ScaleDivide whatever lies past it. Version 4 with the full size, and version 5
// with version 4's size, are refused.
TEST_F(QuantValidate, VersionFourCallers) {
  EXPECT_EQ(kFusedArgsV4Bytes,
            offsetof(arfFusedArgs_t, norm_rounding) + sizeof(arfNormRounding_t));
  EXPECT_GT(sizeof(arfFusedArgs_t), kFusedArgsV4Bytes);
  args_.struct_size = kFusedArgsV4Bytes;
  args_.version = 4;
  args_.norm_rounding = arfNormRoundBeforeWeight;
  args_.scale_rule = static_cast<arfFp8ScaleRule_t>(9);  // beyond the v4 struct: ignored
  for (const arfPattern_t p : kQuantPatterns) {
    args_.pattern = p;
    expect_ok();
  }
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  args_.norm_rounding = static_cast<arfNormRounding_t>(7);  // inside the v4 struct: checked
  expect_error("norm_rounding 7 is not a valid arfNormRounding_t");
  args_.norm_rounding = arfNormRoundOnce;
  args_.version = 5;
  expect_error("args->version 5 does not match args->struct_size");
  args_.struct_size = sizeof(arfFusedArgs_t);
  args_.version = 4;
  expect_error("args->version 4 does not match args->struct_size");
  args_.version = 6;
  expect_error("scale_rule 9 is not a valid arfFp8ScaleRule_t");
  args_.struct_size = kFusedArgsV5Bytes;  // a version-5 struct has scale_rule too
  args_.version = 5;
  expect_error("scale_rule 9 is not a valid arfFp8ScaleRule_t");

  // The upgrade reads exactly the caller's bytes and fills in the default.
  args_.struct_size = kFusedArgsV4Bytes;
  args_.version = 4;
  args_.norm_rounding = arfNormRoundBeforeWeight;
  std::vector<unsigned char> v4(kFusedArgsV4Bytes);
  std::memcpy(v4.data(), &args_, kFusedArgsV4Bytes);
  const arfFusedArgs_t up =
      upgrade_fused_args(reinterpret_cast<const arfFusedArgs_t*>(v4.data())).get();
  EXPECT_EQ(up.scale_rule, arfFp8ScaleDivide);
  EXPECT_EQ(up.norm_rounding, arfNormRoundBeforeWeight);
  EXPECT_EQ(up.struct_size, kFusedArgsV4Bytes);
  arfFusedArgs_t init;
  arfFusedArgsInit(&init);
  EXPECT_EQ(init.scale_rule, arfFp8ScaleDivide);
  EXPECT_EQ(init.version, static_cast<unsigned>(ARF_API_VERSION));
  EXPECT_EQ(init.struct_size, sizeof(arfFusedArgs_t));
}

// scale_rule: either rule for fp8 per-token and per-group (every layout and format), the divide
// rule only for every other pattern, values outside the enum nowhere; checked by the shape-only
// validation (arfPlanShape) as well, and for empty calls.
TEST_F(QuantValidate, ScaleRule) {
  const arfPattern_t plain[] = {arfPatternAllReduce, arfPatternResidualRmsNorm,
                                arfPatternResidualRmsNormFp8PerTensor,
                                arfPatternResidualRmsNormNvfp4, arfPatternResidualRmsNormMxfp4};
  args_.scale_rule = arfFp8ScaleTimesReciprocal;
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  expect_ok();
  args_.pattern = arfPatternResidualRmsNormFp8PerGroup;
  for (const arfScaleLayout_t layout : {arfScaleRowMajor, arfScaleMnMajor}) {
    for (const arfScaleFormat_t format :
         {arfScaleFp32, arfScaleUe8m0AsFp32, arfScaleUe8m0Packed}) {
      args_.scale_layout = layout;
      args_.scale_format = format;
      expect_ok();
    }
  }
  args_.scale_layout = arfScaleRowMajor;
  args_.scale_format = arfScaleFp32;
  for (const arfPattern_t p : plain) {
    args_.pattern = p;
    if (p == arfPatternAllReduce) args_.allreduce_out = addr(kNormOut);
    args_.scale_rule = arfFp8ScaleTimesReciprocal;
    expect_error(std::string("scale_rule arfFp8ScaleTimesReciprocal applies to fp8 per-token and "
                             "per-group only (their dynamic scales), not to pattern ") +
                 arfPatternName(p));
    EXPECT_EQ(validate_shape(upgrade_fused_args(&args_), facts_).code(), arfInvalidArgument);
    args_.scale_rule = arfFp8ScaleDivide;
    expect_ok();
  }
  for (const int bad : {2, -1, 1 << 20}) {
    for (const arfPattern_t p : {arfPatternResidualRmsNorm, arfPatternResidualRmsNormFp8PerToken}) {
      args_.pattern = p;
      std::memcpy(&args_.scale_rule, &bad, sizeof(bad));  // any int a C caller may store
      expect_error("scale_rule " + std::to_string(bad) + " is not a valid arfFp8ScaleRule_t");
      EXPECT_EQ(validate_shape(upgrade_fused_args(&args_), facts_).code(), arfInvalidArgument);
    }
  }
  args_.num_tokens = 0;  // an empty call is still checked
  expect_error("is not a valid arfFp8ScaleRule_t");
  args_.scale_rule = arfFp8ScaleTimesReciprocal;
  args_.pattern = arfPatternResidualRmsNormFp8PerGroup;
  expect_ok();
  EXPECT_TRUE(quant_has_dynamic_fp8_scale(Pattern::kFp8PerToken));
  EXPECT_TRUE(quant_has_dynamic_fp8_scale(Pattern::kFp8PerGroup));
  EXPECT_FALSE(quant_has_dynamic_fp8_scale(Pattern::kFp8PerTensor));
  EXPECT_FALSE(quant_has_dynamic_fp8_scale(Pattern::kNvfp4));
}

TEST_F(QuantValidate, ResidualInMayBeNull) {
  std::vector<std::string> names;
  check_ = [&names](const void*, const char* name, int) {
    names.push_back(name);
    return Status::ok();
  };
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  args_.residual_in = nullptr;
  ASSERT_TRUE(run().is_ok()) << run().message();
  EXPECT_EQ(names, (std::vector<std::string>{"input", "gamma", "residual_out", "norm_out",
                                             "quant_out", "scale_out"}));
}

TEST(UpgradeFusedArgs, ReadsNoFurtherThanStructSize) {
  arfFusedArgs_t full;
  arfFusedArgsInit(&full);
  full.struct_size = kFusedArgsV1Bytes;
  full.version = 1;
  full.hidden = 4096;
  full.eps = 0.5f;
  // Exactly the caller's bytes, nothing after them (AddressSanitizer builds see any overread).
  std::vector<unsigned char> v1(kFusedArgsV1Bytes);
  std::memcpy(v1.data(), &full, kFusedArgsV1Bytes);
  const arfFusedArgs_t up =
      upgrade_fused_args(reinterpret_cast<const arfFusedArgs_t*>(v1.data())).get();
  EXPECT_EQ(up.struct_size, kFusedArgsV1Bytes);
  EXPECT_EQ(up.hidden, 4096u);
  EXPECT_EQ(up.eps, 0.5f);
  EXPECT_EQ(up.quant_out, nullptr);
  EXPECT_EQ(up.scale_in, nullptr);
  EXPECT_EQ(up.fallback, arfFallbackAuto);
  EXPECT_EQ(up.scale_layout, arfScaleRowMajor);

  full.struct_size = 24;  // unknown size: the header only
  const arfFusedArgs_t header = upgrade_fused_args(&full).get();
  EXPECT_EQ(header.struct_size, 24u);
  EXPECT_EQ(header.hidden, 0u);

  arfFusedArgsInit(&full);
  full.fallback = arfFallbackTwoKernels;
  EXPECT_EQ(upgrade_fused_args(&full)->fallback, arfFallbackTwoKernels);  // current: everything
}

}  // namespace
}  // namespace arf
