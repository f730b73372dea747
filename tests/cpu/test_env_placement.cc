// arfCommConfigFromEnv's parsing (core/env_placement.h) and the id text round trip.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "arfusion/arfusion.h"
#include "core/env_placement.h"

namespace arf {
namespace {

EnvLookup from(const std::map<std::string, std::string>& env) {
  return [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

const std::string kId = "00112233445566778899aabbccddeeff";

TEST(EnvPlacement, ReadsEveryField) {
  Result<EnvPlacement> p = placement_from_env(from(
      {{"ARF_RANK", "3"}, {"ARF_WORLD_SIZE", "4"}, {"ARF_DEVICE", "1"}, {"ARF_RENDEZVOUS_ID", kId}}));
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value().rank, 3);
  EXPECT_EQ(p.value().world_size, 4);
  EXPECT_EQ(p.value().device, 1);
  EXPECT_EQ(p.value().rendezvous_id, kId);
}

TEST(EnvPlacement, DeviceDefaultsToZero) {
  Result<EnvPlacement> p = placement_from_env(
      from({{"ARF_RANK", "0"}, {"ARF_WORLD_SIZE", "2"}, {"ARF_RENDEZVOUS_ID", kId}}));
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p.value().device, 0);
}

TEST(EnvPlacement, RefusesMissingAndMalformedValuesNamingTheVariable) {
  const std::map<std::string, std::string> good = {
      {"ARF_RANK", "1"}, {"ARF_WORLD_SIZE", "2"}, {"ARF_RENDEZVOUS_ID", kId}};
  struct Case {
    const char* name;
    const char* value;  // nullptr: removed
  };
  const Case cases[] = {{"ARF_RANK", nullptr},       {"ARF_RANK", ""},
                        {"ARF_RANK", "-1"},          {"ARF_RANK", "1x"},
                        {"ARF_RANK", " 1"},          {"ARF_WORLD_SIZE", nullptr},
                        {"ARF_WORLD_SIZE", "99999999999"}, {"ARF_DEVICE", "gpu0"},
                        {"ARF_RENDEZVOUS_ID", nullptr}};
  for (const Case& c : cases) {
    std::map<std::string, std::string> env = good;
    if (c.value == nullptr) {
      env.erase(c.name);
    } else {
      env[c.name] = c.value;
    }
    Result<EnvPlacement> p = placement_from_env(from(env));
    ASSERT_FALSE(p.is_ok()) << c.name << "=" << (c.value ? c.value : "(unset)");
    EXPECT_EQ(p.status().code(), arfInvalidArgument);
    EXPECT_NE(p.status().message().find(c.name), std::string::npos) << p.status().message();
  }
}

TEST(UniqueIdText, RoundTripsTheFirstSixteenBytes) {
  arfUniqueId id;
  ASSERT_EQ(arfGetUniqueId(&id), arfSuccess);
  char text[ARF_UNIQUE_ID_STRING_BYTES];
  ASSERT_EQ(arfUniqueIdToString(&id, text), arfSuccess);
  EXPECT_EQ(std::strlen(text), 32u);
  arfUniqueId back;
  std::memset(&back, 0x5A, sizeof(back));
  ASSERT_EQ(arfUniqueIdFromString(text, &back), arfSuccess);
  EXPECT_EQ(std::memcmp(back.internal, id.internal, 16), 0);
  for (size_t i = 16; i < sizeof(back.internal); ++i) EXPECT_EQ(back.internal[i], 0) << i;
}

TEST(UniqueIdText, RefusesBadText) {
  arfUniqueId id;
  EXPECT_EQ(arfUniqueIdFromString("xyz", &id), arfInvalidArgument);
  EXPECT_EQ(arfUniqueIdFromString(nullptr, &id), arfInvalidArgument);
  EXPECT_EQ(arfUniqueIdToString(nullptr, nullptr), arfInvalidArgument);
}

TEST(CommConfigFromEnv, FillsTheIpcPlacementAndKeepsCapacity) {
  setenv("ARF_RANK", "1", 1);
  setenv("ARF_WORLD_SIZE", "2", 1);
  setenv("ARF_DEVICE", "0", 1);
  setenv("ARF_RENDEZVOUS_ID", kId.c_str(), 1);
  arfCommConfig_t c;
  arfCommConfigInit(&c);
  c.max_tokens = 77;
  ASSERT_EQ(arfCommConfigFromEnv(&c), arfSuccess) << arfGetLastErrorString();
  EXPECT_EQ(c.transport, arfTransportIpc);
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.max_tokens, 77u);
  char text[ARF_UNIQUE_ID_STRING_BYTES];
  ASSERT_EQ(arfUniqueIdToString(&c.id, text), arfSuccess);
  EXPECT_EQ(std::string(text), kId);
  setenv("ARF_RENDEZVOUS_ID", "not-hex", 1);
  EXPECT_EQ(arfCommConfigFromEnv(&c), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("ARF_RENDEZVOUS_ID"), std::string::npos);
  for (const char* n : {"ARF_RANK", "ARF_WORLD_SIZE", "ARF_DEVICE", "ARF_RENDEZVOUS_ID"}) unsetenv(n);
}

}  // namespace
}  // namespace arf
