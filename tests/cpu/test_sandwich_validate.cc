// Validation of sandwich calls (arfFusedArgs_t::post_gamma, API version 6): which patterns take
// it, its alignment, extent, aliasing and device, and the struct sizes of older callers (a
// version-5 struct has no post_gamma: it reads as NULL). Fabricated addresses, never dereferenced;
// device residency through an injected check, as in test_validate.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/validate.h"
#include "cpu/validate_test_util.h"

namespace arf {
namespace {

using namespace validate_test;  // validate_test_util.h

// The sandwich call's own tensors (validate_test_util.h: a test's own range).
constexpr uint64_t kPostGamma = 0x60000000, kQuantOut = 0x68000000, kScaleOut = 0x6c000000;

// Sandwich calls are refused unless ARF_EXPERIMENTAL_SANDWICH=1 (validate.cc: offered once their
// GPU tests have passed); these tests check what validation does once they are offered, and
// NotOfferedWithoutTheSetting the refusal itself.
class SandwichValidate : public ::testing::Test {
 protected:
  void SetUp() override { setenv("ARF_EXPERIMENTAL_SANDWICH", "1", 1); }
  void TearDown() override { unsetenv("ARF_EXPERIMENTAL_SANDWICH"); }

  SandwichValidate() : facts_(small_facts(2)), args_(norm_call()), check_(foreign_memory_check()) {
    args_.post_gamma = addr(kPostGamma);
  }

  Status run() const { return validate(upgrade_fused_args(&args_), facts_, 0, check_); }
  Status run_shape() const { return validate_shape(upgrade_fused_args(&args_), facts_); }

  static void expect_error(const Status& s, const std::string& substring) {
    expect_status(s, arfInvalidArgument, substring);
  }

  StaticFacts facts_;
  arfFusedArgs_t args_{};
  PointerCheck check_;
};

TEST_F(SandwichValidate, NormPatternsTakeIt) {
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.residual_in = nullptr;  // no residual: residual_out = h
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.residual_in = addr(kResidualIn);
  args_.residual_out = addr(kResidualIn);  // in place
  args_.norm_out = addr(kInput);
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.post_gamma = args_.gamma;  // the same weights as gamma: inputs may overlap
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.post_gamma = addr(kPostGamma);
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  args_.quant_out = addr(kQuantOut);
  args_.scale_out = addr(kScaleOut);
  args_.norm_out = nullptr;
  EXPECT_TRUE(run().is_ok()) << run().message();
  EXPECT_TRUE(run_shape().is_ok()) << run_shape().message();
}

TEST_F(SandwichValidate, AllReduceRefusesItBeforeAnyTensorIsLookedAt) {
  args_.pattern = arfPatternAllReduce;
  args_.allreduce_out = addr(kResidualOut);
  expect_error(run(), "pattern allreduce has no norm");
  expect_error(run_shape(), "post_gamma");
  args_.num_tokens = 0;  // an empty call is refused all the same: the shape is wrong
  expect_error(run(), "post_gamma");
  args_.post_gamma = nullptr;
  EXPECT_TRUE(run().is_ok()) << run().message();
}

TEST_F(SandwichValidate, Misaligned) {
  args_.post_gamma = addr(kPostGamma + 8);
  expect_error(run(), "post_gamma 0x60000008 is not 16-byte aligned");
  EXPECT_TRUE(run_shape().is_ok());  // the shape checks read no address
}

// post_gamma spans [hidden] of gamma_dtype: an output starting inside that extent is refused,
// and one just past it passes; the extent doubles with fp32 gamma.
TEST_F(SandwichValidate, OverlapsNoOutput) {
  args_.residual_out = addr(kPostGamma + 2 * kHidden - 16);
  expect_error(run(), "illegal aliasing");
  expect_error(run(), "post_gamma");
  args_.residual_out = addr(kPostGamma + 2 * kHidden);
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.gamma_dtype = arfFloat32;
  expect_error(run(), "post_gamma");
  args_.residual_out = addr(kPostGamma + 4 * kHidden);
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.residual_out = addr(kResidualOut);
  args_.norm_out = addr(kPostGamma);
  expect_error(run(), "post_gamma");
  args_.norm_out = addr(kNormOut);
  args_.pattern = arfPatternResidualRmsNormFp8PerTensor;
  args_.scale_in = static_cast<const float*>(addr(kScaleOut));
  args_.quant_out = addr(kPostGamma);
  expect_error(run(), "post_gamma");
}

TEST_F(SandwichValidate, OnTheCommunicatorsDevice) {
  args_.post_gamma = addr(kForeignBase + 0x100);
  expect_error(run(), "post_gamma is memory of device 1");
}

// A version-5 caller's struct ends before post_gamma: whatever lies past it, the call is not a
// sandwich. Version 6 needs the full size, and the full size needs version 6.
TEST_F(SandwichValidate, OlderStructSizes) {
  EXPECT_EQ(args_.version, 6u);
  EXPECT_EQ(kFusedArgsV5Bytes, offsetof(arfFusedArgs_t, post_gamma));
  std::vector<unsigned char> v5(kFusedArgsV5Bytes);
  args_.struct_size = kFusedArgsV5Bytes;
  args_.version = 5;
  args_.pattern = arfPatternAllReduce;  // a post_gamma past the struct would make this an error
  args_.allreduce_out = addr(kResidualOut);
  std::memcpy(v5.data(), &args_, kFusedArgsV5Bytes);
  const arfFusedArgs_t* caller = reinterpret_cast<const arfFusedArgs_t*>(v5.data());
  const FusedArgs up = upgrade_fused_args(caller);
  EXPECT_TRUE(validate(up, facts_, 0, check_).is_ok());
  EXPECT_EQ(up->post_gamma, nullptr);
  EXPECT_EQ(up->struct_size, kFusedArgsV5Bytes);
  args_.version = 6;
  expect_error(run(), "args->version 6 does not match args->struct_size");
  args_.struct_size = sizeof(arfFusedArgs_t);
  args_.version = 5;
  expect_error(run(), "args->version 5 does not match args->struct_size");
}

TEST_F(SandwichValidate, NotOfferedWithoutTheSetting) {
  for (const char* value : {static_cast<const char*>(nullptr), "0", "true", "11"}) {
    if (value == nullptr) {
      unsetenv("ARF_EXPERIMENTAL_SANDWICH");
    } else {
      setenv("ARF_EXPERIMENTAL_SANDWICH", value, 1);
    }
    for (const Status& s : {run(), run_shape()}) {
      EXPECT_EQ(s.code(), arfUnsupported) << (value ? value : "unset") << ": " << s.message();
      EXPECT_NE(s.message().find("not offered yet"), std::string::npos) << s.message();
    }
  }
  args_.post_gamma = nullptr;  // the same call without the post-norm is untouched by the setting
  EXPECT_TRUE(run().is_ok()) << run().message();
  setenv("ARF_EXPERIMENTAL_SANDWICH", "1", 1);
  args_.post_gamma = addr(kPostGamma);
  EXPECT_TRUE(run().is_ok()) << run().message();
}

}  // namespace
}  // namespace arf
