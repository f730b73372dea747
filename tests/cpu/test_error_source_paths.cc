// Error messages name the source file a failure travelled through (Status::with_context, from
// __FILE__). They must read the same on every machine: relative to the repository
// ("src/core/validate.cc:376: ..."), never the build machine's absolute source directory. The
// build maps that directory away (-fmacro-prefix-map in CMakeLists.txt, for the host compiler and
// nvcc's); ARF_TEST_SOURCE_DIR is the absolute directory the map removes.
#include <gtest/gtest.h>

#include <string>

#include "core/validate.h"

namespace arf {
namespace {

TEST(ErrorSourcePaths, AreRelativeToTheRepository) {
  StaticFacts facts;
  facts.world = 2;
  facts.max_tokens = 64;
  facts.max_hidden = 8192;
  facts.oneshot_max_tokens = 64;
  arfFusedArgs_t args;
  arfFusedArgsInit(&args);
  args.num_tokens = 4;
  args.hidden = 4100;  // not a multiple of 8: refused by check_shape, through ARF_RETURN_IF_ERROR
  const Status s = validate_shape(upgrade_fused_args(&args), facts);
  ASSERT_EQ(s.code(), arfInvalidArgument) << s.message();
  const std::string message = s.message();
  const std::string source_dir = ARF_TEST_SOURCE_DIR;
  ASSERT_FALSE(source_dir.empty());
  EXPECT_EQ(message.find(source_dir), std::string::npos)
      << "the message names the build machine's source directory: " << message;
  EXPECT_EQ(message.rfind("src/core/validate.cc:", 0), 0u)
      << "the message should start with the repository-relative file: " << message;
}

}  // namespace
}  // namespace arf
