// The C API surface that needs no GPU: name tables and their round trip, status strings, defaults of
// the Init functions, unique ids, null-argument handling, config rejection before any CUDA call, and
// the C++ wrapper's error type.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "arfusion/arfusion.h"
#include "arfusion/arfusion.hpp"
#include "core/communicator.h"

namespace {

TEST(Names, Algorithms) {
  EXPECT_STREQ(arfAlgorithmName(arfAlgoAuto), "auto");
  EXPECT_STREQ(arfAlgorithmName(arfAlgoOneshotLamport), "oneshot_lamport");
  EXPECT_STREQ(arfAlgorithmName(arfAlgoOneshotPull), "oneshot_pull");
  EXPECT_STREQ(arfAlgorithmName(arfAlgoTwoshot), "twoshot");
  EXPECT_STREQ(arfAlgorithmName(arfAlgoUnfused), "unfused");
  EXPECT_STREQ(arfAlgorithmName(arfAlgoNccl), "nccl");
  EXPECT_STREQ(arfAlgorithmName(static_cast<arfAlgorithm_t>(99)), "unknown");
}

TEST(Names, AlgorithmRoundTrip) {
  for (int a = arfAlgoAuto; a <= arfAlgoNccl; ++a) {
    arfAlgorithm_t parsed = arfAlgoAuto;
    const char* name = arfAlgorithmName(static_cast<arfAlgorithm_t>(a));
    ASSERT_EQ(arfAlgorithmFromName(name, &parsed), arfSuccess) << name;
    EXPECT_EQ(parsed, a);
  }
  arfAlgorithm_t parsed = arfAlgoTwoshot;
  EXPECT_EQ(arfAlgorithmFromName("two_shot", &parsed), arfInvalidArgument);
  EXPECT_EQ(parsed, arfAlgoTwoshot);  // untouched on failure
  EXPECT_NE(std::string(arfGetLastErrorString()).find("unknown algorithm name \"two_shot\""),
            std::string::npos);
  EXPECT_EQ(arfAlgorithmFromName(nullptr, &parsed), arfInvalidArgument);
  EXPECT_EQ(arfAlgorithmFromName("auto", nullptr), arfInvalidArgument);
}

TEST(Names, Patterns) {
  EXPECT_STREQ(arfPatternName(arfPatternAllReduce), "allreduce");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNorm), "residual_rmsnorm");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNormFp8PerTensor),
               "residual_rmsnorm_fp8_per_tensor");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNormFp8PerToken),
               "residual_rmsnorm_fp8_per_token");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNormFp8PerGroup),
               "residual_rmsnorm_fp8_per_group");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNormNvfp4), "residual_rmsnorm_nvfp4");
  EXPECT_STREQ(arfPatternName(arfPatternResidualRmsNormMxfp4), "residual_rmsnorm_mxfp4");
  EXPECT_STREQ(arfPatternName(static_cast<arfPattern_t>(7)), "unknown");
}

TEST(Names, StatusStringsAreDistinct) {
  std::set<std::string> seen;
  for (int s = arfSuccess; s <= arfCommFailed; ++s) {
    const std::string str = arfGetStatusString(static_cast<arfStatus_t>(s));
    EXPECT_NE(str, "unknown status") << s;
    EXPECT_TRUE(seen.insert(str).second) << str;
  }
  EXPECT_STREQ(arfGetStatusString(arfTimeout), "timeout");
  EXPECT_STREQ(arfGetStatusString(static_cast<arfStatus_t>(77)), "unknown status");
}

TEST(Init, ConfigDefaults) {
  arfCommConfig_t c;
  std::memset(&c, 0xab, sizeof(c));
  arfCommConfigInit(&c);
  EXPECT_EQ(c.struct_size, sizeof(arfCommConfig_t));
  EXPECT_EQ(c.version, static_cast<unsigned>(ARF_API_VERSION));
  EXPECT_EQ(c.transport, arfTransportLocal);
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(c.dtype, arfBFloat16);
  EXPECT_EQ(c.max_tokens, 1024u);
  EXPECT_EQ(c.max_hidden, 8192u);
  EXPECT_EQ(c.oneshot_max_tokens, 0u);
  EXPECT_GT(c.timeout_seconds, 0.0);
  EXPECT_GT(c.init_timeout_seconds, 0.0);
  arfCommConfigInit(nullptr);  // tolerated
}

TEST(Init, FusedArgsDefaults) {
  arfFusedArgs_t a;
  std::memset(&a, 0xab, sizeof(a));
  arfFusedArgsInit(&a);
  EXPECT_EQ(a.struct_size, sizeof(arfFusedArgs_t));
  EXPECT_EQ(a.version, static_cast<unsigned>(ARF_API_VERSION));
  EXPECT_EQ(a.pattern, arfPatternResidualRmsNorm);
  EXPECT_EQ(a.algorithm, arfAlgoAuto);
  EXPECT_EQ(a.dtype, arfBFloat16);
  EXPECT_EQ(a.gamma_dtype, arfBFloat16);
  EXPECT_EQ(a.gamma_plus_one, 0);
  EXPECT_FLOAT_EQ(a.eps, 1e-6f);
  EXPECT_EQ(a.input, nullptr);
  EXPECT_EQ(a.allreduce_out, nullptr);
  EXPECT_EQ(a.residual_in, nullptr);
  EXPECT_EQ(a.residual_out, nullptr);
  EXPECT_EQ(a.norm_out, nullptr);
  EXPECT_EQ(a.gamma, nullptr);
  EXPECT_EQ(a.num_tokens, 0u);
  EXPECT_EQ(a.quant_out, nullptr);
  EXPECT_EQ(a.scale_out, nullptr);
  EXPECT_EQ(a.scale_in, nullptr);
  EXPECT_EQ(a.scale_layout, arfScaleRowMajor);
  EXPECT_EQ(a.scale_format, arfScaleFp32);
  EXPECT_EQ(a.fallback, arfFallbackAuto);
}

TEST(UniqueId, FreshEachCall) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) {
    arfUniqueId id;
    ASSERT_EQ(arfGetUniqueId(&id), arfSuccess);
    EXPECT_TRUE(ids.insert(std::string(id.internal, sizeof(id.internal))).second);
  }
  EXPECT_EQ(arfGetUniqueId(nullptr), arfInvalidArgument);
}

TEST(NullArguments, RejectedWithTheArgumentNamed) {
  EXPECT_EQ(arfCommDestroy(nullptr), arfSuccess);
  int v = 0;
  EXPECT_EQ(arfCommGetRank(nullptr, &v), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("comm is NULL"), std::string::npos);
  EXPECT_EQ(arfCommGetWorldSize(nullptr, &v), arfInvalidArgument);
  EXPECT_EQ(arfCommGetAsyncError(nullptr), arfInvalidArgument);
  arfFusedArgs_t args;
  arfFusedArgsInit(&args);
  arfPlan_t plan;
  EXPECT_EQ(arfPlan(nullptr, &args, &plan), arfInvalidArgument);
  EXPECT_EQ(arfFusedAllReduce(nullptr, &args, nullptr), arfInvalidArgument);
  EXPECT_EQ(arfAllReduce(nullptr, nullptr, nullptr, 0, arfBFloat16, nullptr), arfInvalidArgument);
  arfComm_t comm = reinterpret_cast<arfComm_t>(0x1);
  EXPECT_EQ(arfCommInitRank(&comm, nullptr), arfInvalidArgument);
  EXPECT_EQ(comm, nullptr);  // never left dangling
  EXPECT_NE(std::string(arfGetLastErrorString()).find("config is NULL"), std::string::npos);
}

// These configs are rejected by validate_config, before the library touches CUDA.
TEST(InitRank, BadConfigRejectedBeforeAnyCudaCall) {
  struct Case {
    const char* what;
    void (*mutate)(arfCommConfig_t*);
    arfStatus_t code;
    const char* substring;
  };
  const Case cases[] = {
      {"world 3", [](arfCommConfig_t* c) { c->world_size = 3; }, arfInvalidArgument,
       "world_size 3 is not 1, 2, 4 or 8"},
      {"rank", [](arfCommConfig_t* c) { c->world_size = 2; c->rank = 2; }, arfInvalidArgument,
       "rank 2 is outside [0, 2)"},
      {"hidden", [](arfCommConfig_t* c) { c->max_hidden = 20000; }, arfInvalidArgument,
       "max_hidden 20000"},
      {"hidden%8", [](arfCommConfig_t* c) { c->max_hidden = 4100; }, arfInvalidArgument,
       "multiple of 8"},
      {"tokens", [](arfCommConfig_t* c) { c->max_tokens = 0; }, arfInvalidArgument,
       "max_tokens 0"},
      {"dtype", [](arfCommConfig_t* c) { c->dtype = arfFloat32; }, arfInvalidArgument,
       "config dtype 2"},
      {"transport", [](arfCommConfig_t* c) { c->transport = static_cast<arfTransport_t>(7); },
       arfInvalidArgument, "is not a valid arfTransport_t"},
      {"size", [](arfCommConfig_t* c) { c->struct_size = 8; }, arfInvalidArgument,
       "use arfCommConfigInit"},
      {"timeout", [](arfCommConfig_t* c) { c->timeout_seconds = -1; }, arfInvalidArgument,
       "timeout_seconds"},
  };
  for (const Case& k : cases) {
    arfCommConfig_t c;
    arfCommConfigInit(&c);
    k.mutate(&c);
    arfComm_t comm = nullptr;
    EXPECT_EQ(arfCommInitRank(&comm, &c), k.code) << k.what;
    EXPECT_EQ(comm, nullptr) << k.what;
    EXPECT_NE(std::string(arfGetLastErrorString()).find(k.substring), std::string::npos)
        << k.what << ": " << arfGetLastErrorString();
  }
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  arfComm_t comms[3] = {};
  const int devices[3] = {0, 0, 0};
  EXPECT_EQ(arfCommInitAll(comms, 3, devices, &c), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("world_size 3"), std::string::npos);
}

TEST(CppWrapper, ErrorCarriesStatusAndDetail) {
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  c.world_size = 3;
  try {
    arfusion::Comm::init_rank(c);
    FAIL() << "expected arfusion::Error";
  } catch (const arfusion::Error& e) {
    EXPECT_EQ(e.status(), arfInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("arfCommInitRank: invalid argument: "), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("world_size 3"), std::string::npos);
  }
  arfusion::Comm empty;
  EXPECT_FALSE(empty);
  arfusion::Comm moved = std::move(empty);
  EXPECT_EQ(moved.get(), nullptr);
  EXPECT_NO_THROW(arfusion::check(arfSuccess, "noop"));
}


// API version 3 added arfCommConfig_t::programmatic_launch: a version-2 caller's shorter struct is
// still accepted (the field reads as 0), mismatched size/version pairs and bad values are not.
TEST(ConfigVersions, VersionTwoStructsStillWork) {
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  EXPECT_EQ(c.programmatic_launch, 0);
  EXPECT_TRUE(arf::validate_config(c).is_ok());
  arfCommConfig_t v2 = c;
  v2.struct_size = arf::kCommConfigV2Bytes;
  v2.version = 2;
  v2.programmatic_launch = 7;  // beyond a version-2 struct: never read
  const arfCommConfig_t upgraded = arf::upgrade_config(&v2);
  EXPECT_EQ(upgraded.programmatic_launch, 0);
  EXPECT_EQ(upgraded.max_tokens, c.max_tokens);
  EXPECT_TRUE(arf::validate_config(upgraded).is_ok());
  arfCommConfig_t wrong = c;
  wrong.version = 2;  // full size claims version 3
  EXPECT_EQ(arf::validate_config(wrong).code(), arfInvalidArgument);
  // Version 5 changed arfFusedArgs_t only: a version-4 or 5 caller's config (the same layout,
  // ending before version 6's max_ctas) still works, and reads max_ctas as 0.
  arfCommConfig_t v4 = c;
  v4.struct_size = arf::kCommConfigV5Bytes;
  v4.version = 4;
  v4.max_ctas = 99;  // beyond a version-5 struct: never read
  EXPECT_TRUE(arf::validate_config(arf::upgrade_config(&v4)).is_ok());
  EXPECT_EQ(arf::upgrade_config(&v4).max_ctas, 0);
  v4.version = 5;
  EXPECT_TRUE(arf::validate_config(arf::upgrade_config(&v4)).is_ok());
  v4.version = 6;  // version 6 has max_ctas: its size is the full one
  EXPECT_EQ(arf::validate_config(v4).code(), arfInvalidArgument);
  arfCommConfig_t full = c;
  full.version = 5;  // full size claims version 6
  EXPECT_EQ(arf::validate_config(full).code(), arfInvalidArgument);
  full.version = 7;
  EXPECT_EQ(arf::validate_config(full).code(), arfInvalidArgument);
  full.version = 6;
  full.max_ctas = -1;
  EXPECT_NE(arf::validate_config(full).message().find("max_ctas -1 must be >= 0"),
            std::string::npos);
  arfCommConfig_t bad = c;
  bad.programmatic_launch = 2;
  const arf::Status s = arf::validate_config(bad);
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_NE(s.message().find("programmatic_launch 2 must be 0 or 1"), std::string::npos);
}

}  // namespace
