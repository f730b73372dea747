// The caller's arfFusedArgs_t is upgraded once, at the C entry point (validate.h, FusedArgs):
// everything past the ABI boundary takes the upgraded type, so no layer can take the caller's
// struct by mistake (reading fields its struct_size does not cover) or upgrade it again.
#include <gtest/gtest.h>

#include <type_traits>

#include "core/communicator.h"
#include "core/validate.h"

namespace arf {
namespace {

TEST(FusedArgs, OnlyTheUpgradeMakesOne) {
  EXPECT_FALSE((std::is_convertible_v<const arfFusedArgs_t&, FusedArgs>));
  EXPECT_FALSE((std::is_constructible_v<FusedArgs, const arfFusedArgs_t&>));
  EXPECT_FALSE(std::is_default_constructible_v<FusedArgs>);
}

TEST(FusedArgs, InternalEntryPointsTakeTheUpgradedStruct) {
  using Raw = const arfFusedArgs_t&;
  using Up = const FusedArgs&;
  EXPECT_FALSE((std::is_invocable_v<decltype(&validate_shape), Raw, const StaticFacts&>));
  EXPECT_TRUE((std::is_invocable_v<decltype(&validate_shape), Up, const StaticFacts&>));
  EXPECT_FALSE((std::is_invocable_v<decltype(&validate), Raw, const StaticFacts&, int,
                                    const PointerCheck&, const InputBuffer&>));
  EXPECT_FALSE((std::is_invocable_v<decltype(&plan_for_shape), Raw, const StaticFacts&,
                                    const TuningTable*>));
  EXPECT_FALSE((std::is_invocable_v<decltype(&Communicator::plan), const Communicator&, Raw>));
  EXPECT_FALSE(
      (std::is_invocable_v<decltype(&Communicator::plan_shape), const Communicator&, Raw>));
  EXPECT_FALSE((std::is_invocable_v<decltype(&Communicator::fused_allreduce), Communicator&, Raw,
                                    cudaStream_t>));
  EXPECT_TRUE((std::is_invocable_v<decltype(&Communicator::fused_allreduce), Communicator&, Up,
                                   cudaStream_t>));
}

// The upgrade itself: a current struct is copied whole, an older one up to its size.
TEST(FusedArgs, UpgradeKeepsTheCallersFields) {
  arfFusedArgs_t args;
  arfFusedArgsInit(&args);
  args.hidden = 4096;
  args.eps = 0.25f;
  args.norm_rounding = arfNormRoundBeforeWeight;
  const FusedArgs up = upgrade_fused_args(&args);
  EXPECT_EQ(up->hidden, 4096u);
  EXPECT_EQ(up->eps, 0.25f);
  EXPECT_EQ(up.get().norm_rounding, arfNormRoundBeforeWeight);
}

}  // namespace
}  // namespace arf
