// Host-side validation: every rule of validate.h, each asserting the status code AND a substring
// of the message (the message is what a user sees). Pointers are fabricated addresses that are
// never dereferenced; device residency goes through an injected PointerCheck, so no GPU is needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/validate.h"
#include "cpu/validate_test_util.h"

namespace arf {
namespace {

using namespace validate_test;  // validate_test_util.h

constexpr uint64_t kTensorBytes = uint64_t{kTokens} * kHidden * 2;
constexpr uint64_t kArOut = 0x60000000;  // allreduce_out (validate_test_util.h: a test's own range)

class Validate : public ::testing::Test {
 protected:
  Validate() : facts_(small_facts(4)), args_(norm_call()), check_(foreign_memory_check()) {
    args_.allreduce_out = addr(kArOut);
  }

  Status run() const { return validate(upgrade_fused_args(&args_), facts_, /*device=*/0, check_); }

  void expect_error(arfStatus_t code, const std::string& substring) const {
    expect_status(run(), code, substring);
  }

  StaticFacts facts_;
  arfFusedArgs_t args_{};
  PointerCheck check_;
};

TEST_F(Validate, WellFormedCallsPass) {
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.pattern = arfPatternAllReduce;
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.num_tokens = 0;  // a no-op: pointers not even looked at
  args_.input = nullptr;
  EXPECT_TRUE(run().is_ok()) << run().message();
}

TEST_F(Validate, StructHeader) {
  args_.struct_size = 12;
  expect_error(arfInvalidArgument, "struct_size is 12");
  args_.struct_size = sizeof(arfFusedArgs_t);
  args_.version = 99;
  expect_error(arfInvalidArgument, "version is 99");
}

TEST_F(Validate, EnumRanges) {
  args_.pattern = static_cast<arfPattern_t>(7);
  expect_error(arfInvalidArgument, "pattern 7");
  args_.pattern = arfPatternResidualRmsNorm;
  args_.algorithm = static_cast<arfAlgorithm_t>(42);
  expect_error(arfInvalidArgument, "algorithm 42");
  args_.algorithm = arfAlgoAuto;
  args_.dtype = arfFloat32;
  expect_error(arfInvalidArgument, "not an activation dtype");
}

TEST_F(Validate, DtypeMismatch) {
  args_.dtype = arfFloat16;
  args_.gamma_dtype = arfFloat16;
  expect_error(arfInvalidArgument, "dtype mismatch: call fp16, communicator bf16");
}

// Over capacity only the nccl algorithm can run a call (policy_nccl tests the plan): with an NCCL
// communicator, auto and forced nccl pass validation, other algorithms and quantized calls without
// norm_out (no buffer for the rows between the kernels) do not; without one, nothing does.
TEST_F(Validate, OverCapacityOnlyOnNccl) {
  args_.num_tokens = 129;
  expect_error(arfInvalidArgument, "run on the nccl algorithm only, which this communicator does not have");
  facts_.nccl = true;
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.algorithm = arfAlgoNccl;
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.algorithm = arfAlgoTwoshot;
  expect_error(arfInvalidArgument, "over capacity only algorithm auto or nccl");
  args_.algorithm = arfAlgoAuto;
  args_.pattern = arfPatternResidualRmsNormFp8PerToken;
  args_.quant_out = addr(kArOut);
  args_.scale_out = addr(kForeignBase - 0x1000000);
  args_.norm_out = nullptr;
  expect_error(arfInvalidArgument, "needs norm_out");
  args_.num_tokens = static_cast<size_t>(INT32_MAX) + 1;
  args_.pattern = arfPatternResidualRmsNorm;
  args_.norm_out = addr(kNormOut);
  expect_error(arfInvalidArgument, "exceeds 2^31 - 1");
}

TEST_F(Validate, HiddenAndCapacity) {
  args_.hidden = 4100;
  expect_error(arfInvalidArgument, "hidden 4100 is not a multiple of 8");
  args_.hidden = 8200;
  expect_error(arfInvalidArgument, "hidden 8200 is outside [8, 8192]");
  args_.hidden = 0;
  expect_error(arfInvalidArgument, "hidden 0 is outside");
  args_.hidden = kHidden;
  args_.num_tokens = 129;
  expect_error(arfInvalidArgument, "num_tokens 129 exceeds the communicator's max_tokens 128");
  facts_.max_hidden = 32768;  // never beyond what the kernels are built for
  args_.num_tokens = 1;
  args_.hidden = 16392;
  expect_error(arfInvalidArgument, "outside [8, 16384]");
}

TEST_F(Validate, NullPointersPerPattern) {
  args_.gamma = nullptr;
  expect_error(arfInvalidArgument, "gamma is NULL (required by pattern residual_rmsnorm)");
  args_.gamma = addr(kGamma);
  args_.residual_out = nullptr;
  expect_error(arfInvalidArgument, "residual_out is NULL");
  args_.pattern = arfPatternAllReduce;  // residual tensors are not used by this pattern
  EXPECT_TRUE(run().is_ok());
  args_.allreduce_out = nullptr;
  expect_error(arfInvalidArgument, "allreduce_out is NULL (required by pattern allreduce)");
  args_.allreduce_out = addr(kArOut);
  args_.input = nullptr;
  expect_error(arfInvalidArgument, "input is NULL");
}

TEST_F(Validate, Misaligned) {
  args_.residual_in = addr(kResidualIn + 8);
  expect_error(arfInvalidArgument, "residual_in 0x20000008 is not 16-byte aligned");
  args_.residual_in = addr(kResidualIn);
  args_.gamma = addr(kGamma + 4);
  expect_error(arfInvalidArgument, "gamma 0x30000004 is not 16-byte aligned");
}

TEST_F(Validate, GammaDtypeEpsAndGemmaFlag) {
  args_.gamma_dtype = arfFloat16;
  expect_error(arfInvalidArgument, "gamma_dtype fp16 must be the activation dtype bf16 or fp32");
  args_.gamma_dtype = arfFloat32;
  EXPECT_TRUE(run().is_ok());
  args_.eps = std::numeric_limits<float>::quiet_NaN();
  expect_error(arfInvalidArgument, "eps nan must be finite and > 0");
  args_.eps = std::numeric_limits<float>::infinity();
  expect_error(arfInvalidArgument, "eps inf must be finite and > 0");
  args_.eps = -1e-6f;
  expect_error(arfInvalidArgument, "eps -1e-06 must be finite and > 0");
  // eps 0: an all-zero row would give 0 * rsqrt(0) = NaN, an underflowing one +-Inf.
  args_.eps = 0.0f;
  expect_error(arfInvalidArgument, "eps 0 must be finite and > 0");
  args_.eps = -0.0f;
  expect_error(arfInvalidArgument, "must be finite and > 0");
  // Any positive float is accepted, the smallest subnormal included.
  args_.eps = std::numeric_limits<float>::denorm_min();
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.eps = std::numeric_limits<float>::max();
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.eps = 1e-6f;
  args_.gamma_plus_one = 2;
  expect_error(arfInvalidArgument, "gamma_plus_one 2 must be 0 or 1");
}

TEST_F(Validate, LegalAliasingAccepted) {
  args_.residual_out = const_cast<void*>(args_.residual_in);
  args_.norm_out = const_cast<void*>(args_.input);
  EXPECT_TRUE(run().is_ok()) << run().message();
  args_.pattern = arfPatternAllReduce;
  args_.allreduce_out = const_cast<void*>(args_.input);
  EXPECT_TRUE(run().is_ok()) << run().message();
}

TEST_F(Validate, IllegalFullAliasing) {
  args_.norm_out = const_cast<void*>(args_.residual_in);
  expect_error(arfInvalidArgument, "illegal aliasing: norm_out");
  expect_error(arfInvalidArgument, "overlaps residual_in");
  args_.norm_out = addr(kNormOut);
  args_.residual_out = const_cast<void*>(args_.input);
  expect_error(arfInvalidArgument, "residual_out [0x10000000");
  args_.residual_out = addr(kNormOut);  // two outputs on one buffer
  expect_error(arfInvalidArgument, "residual_out [0x50000000, +131072 bytes) overlaps norm_out");
}

TEST_F(Validate, IllegalPartialOverlap) {
  // A legal pair, but shifted by one vector: the kernels would read elements already written.
  args_.norm_out = addr(kInput + 16);
  expect_error(arfInvalidArgument, "only exact equality norm_out == input is allowed");
  // The last byte of residual_out touches the first of gamma.
  args_.norm_out = addr(kNormOut);
  args_.residual_out = addr(kGamma - kTensorBytes + 16);
  expect_error(arfInvalidArgument, "overlaps gamma");
  // Adjacent, not overlapping: fine.
  args_.residual_out = addr(kGamma - kTensorBytes);
  EXPECT_TRUE(run().is_ok()) << run().message();
  // allreduce: out starts inside input.
  args_.pattern = arfPatternAllReduce;
  args_.allreduce_out = addr(kInput + kTensorBytes - 16);
  expect_error(arfInvalidArgument, "allreduce_out");
}

TEST_F(Validate, InputsMayOverlapEachOther) {
  // Read-only tensors sharing memory are harmless.
  args_.residual_in = args_.input;
  EXPECT_TRUE(run().is_ok()) << run().message();
}

TEST_F(Validate, WrongDeviceFromInjectedCheck) {
  args_.norm_out = addr(kForeignBase);
  expect_error(arfInvalidArgument, "norm_out is memory of device 1");
  args_.norm_out = addr(kNormOut);
  args_.gamma = addr(kForeignBase + 256);
  expect_error(arfInvalidArgument, "gamma is memory of device 1, the communicator is on device 0");
}

TEST_F(Validate, PointerCheckNotCalledForUnusedOrEmpty) {
  int calls = 0;
  check_ = [&calls](const void*, const char*, int) {
    ++calls;
    return Status::ok();
  };
  args_.pattern = arfPatternAllReduce;
  ASSERT_TRUE(run().is_ok());
  EXPECT_EQ(calls, 2);  // input, allreduce_out
  args_.pattern = arfPatternResidualRmsNorm;
  calls = 0;
  ASSERT_TRUE(run().is_ok());
  EXPECT_EQ(calls, 5);
  calls = 0;
  args_.num_tokens = 0;
  ASSERT_TRUE(run().is_ok());
  EXPECT_EQ(calls, 0);
}

class ValidateAllReduce : public Validate {
 protected:
  Status run_ar(size_t count, const void* in, const void* out,
                arfDataType_t dtype = arfBFloat16) const {
    return validate_allreduce(count, dtype, in, out, facts_, 0, check_);
  }
};

TEST_F(ValidateAllReduce, Rules) {
  EXPECT_TRUE(run_ar(4096, addr(kInput), addr(kArOut)).is_ok());
  EXPECT_TRUE(run_ar(4096, addr(kInput), addr(kInput)).is_ok());  // in place
  EXPECT_TRUE(run_ar(0, nullptr, nullptr).is_ok());

  Status s = run_ar(4100, addr(kInput), addr(kArOut));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("count 4100 is not a multiple of 8"), std::string::npos);

  s = run_ar(128 * 8192 + 8, addr(kInput), addr(kArOut));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("exceeds the capacity 1048576"), std::string::npos);

  s = run_ar(64, addr(kInput), addr(kArOut), arfFloat16);
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("dtype mismatch: call fp16, communicator bf16"), std::string::npos);

  s = run_ar(64, addr(kInput), addr(kInput + 64));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("only exact equality allreduce_out == input"), std::string::npos);

  s = run_ar(64, nullptr, addr(kArOut));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("input is NULL"), std::string::npos);

  s = run_ar(64, addr(kInput), addr(kArOut + 2));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("not 16-byte aligned"), std::string::npos);

  s = run_ar(64, addr(kInput), addr(kForeignBase));
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("allreduce_out is memory of device 1"), std::string::npos);
}

// The communicator's input buffer (validate.h InputBuffer): 128 x 8192 bf16 at kBuffer.
constexpr uint64_t kBuffer = 0x68000000, kBufferBytes = uint64_t{128} * 8192 * 2;

class ValidateInputBuffer : public ValidateAllReduce {
 protected:
  Status run_buf() const {
    return validate(upgrade_fused_args(&args_), facts_, 0, check_,
                    InputBuffer{addr(kBuffer), kBufferBytes});
  }
  Status run_ar_buf(size_t count, const void* in, const void* out) const {
    return validate_allreduce(count, arfBFloat16, in, out, facts_, 0, check_,
                              InputBuffer{addr(kBuffer), kBufferBytes});
  }
  static void expect(const Status& s, const std::string& substring) {
    EXPECT_EQ(s.code(), arfInvalidArgument) << s.message();
    EXPECT_NE(s.message().find(substring), std::string::npos)
        << "message: " << s.message() << "\nexpected to contain: " << substring;
  }
};

TEST_F(ValidateInputBuffer, InputAtItsBaseIsAccepted) {
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();  // nothing there
  args_.input = addr(kBuffer);
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();
  args_.residual_out = const_cast<void*>(args_.residual_in);  // residual in place stays legal
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();
  args_.pattern = arfPatternAllReduce;
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();
  args_.num_tokens = 128;  // the whole buffer
  args_.hidden = 8192;
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();
  EXPECT_TRUE(run_ar_buf(4096, addr(kBuffer), addr(kArOut)).is_ok());
}

TEST_F(ValidateInputBuffer, AnInputElsewhereInItIsRefused) {
  args_.input = addr(kBuffer + 256);
  expect(run_buf(), "must start at its base");
  args_.input = addr(kBuffer - 256);  // starts below, runs into it
  expect(run_buf(), "must start at its base");
  expect(run_ar_buf(4096, addr(kBuffer + 4096), addr(kArOut)), "must start at its base");
}

TEST_F(ValidateInputBuffer, AnInputLargerThanTheBufferIsRefused) {
  facts_.nccl = true;  // over max_tokens only the nccl algorithm runs, and validation lets it through
  args_.input = addr(kBuffer);
  args_.num_tokens = 512;  // max_tokens is 128; 512 x 4096 elements run past the 128 x 8192 buffer
  EXPECT_TRUE(run().is_ok()) << run().message();  // legal where no buffer is modelled
  expect(run_buf(), "the input is larger than the buffer");
  expect(run_ar_buf(128 * 8192 + 8, addr(kBuffer), addr(kArOut)), "the input is larger than the buffer");
}

TEST_F(ValidateInputBuffer, OutputsMayNotAliasAnInputThatIsTheBuffer) {
  args_.input = addr(kBuffer);
  args_.norm_out = addr(kBuffer);  // legal without the buffer (norm_out == input)
  expect(run_buf(), "an output may not alias an input that is the input buffer");
  EXPECT_TRUE(run().is_ok()) << run().message();  // the same call where no buffer is modelled
  args_.norm_out = addr(kNormOut);
  args_.pattern = arfPatternAllReduce;
  args_.allreduce_out = addr(kBuffer);
  expect(run_buf(), "an output may not alias an input that is the input buffer");
  expect(run_ar_buf(4096, addr(kBuffer), addr(kBuffer)), "an output may not alias");
}

TEST_F(ValidateInputBuffer, NothingButTheInputMayLiveThere) {
  args_.residual_in = addr(kBuffer);
  expect(run_buf(), "residual_in");
  expect(run_buf(), "only a call's input may live there");
  args_.residual_in = addr(kResidualIn);
  args_.gamma = addr(kBuffer + kBufferBytes - 256);
  expect(run_buf(), "gamma");
  args_.gamma = addr(kGamma);
  args_.residual_out = addr(kBuffer + 1024);
  expect(run_buf(), "residual_out");
  args_.residual_out = addr(kResidualOut);
  args_.norm_out = addr(kBuffer + 2 * kTensorBytes);
  expect(run_buf(), "norm_out");
  args_.norm_out = addr(kNormOut);
  EXPECT_TRUE(run_buf().is_ok()) << run_buf().message();
  expect(run_ar_buf(4096, addr(kInput), addr(kBuffer)), "only a call's input may live there");
}

}  // namespace
}  // namespace arf
