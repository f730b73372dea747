// arfAbiQuery / arfAbiNames (core/abi.cc) against the public header itself: every field of every
// public struct and every enum constant that arfusion.h declares must be answered, with the value
// the compiler gives it, so a binding that checks its mirrors through arfAbiQuery cannot miss a
// field added to the header later.
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "arfusion/arfusion.h"

namespace {

std::string header_text() {
  // ARF_TEST_SOURCE_DIR: the repository (CMakeLists.txt); __FILE__ names files relative to it.
  std::ifstream in(std::string(ARF_TEST_SOURCE_DIR) + "/include/arfusion/arfusion.h");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// C comments removed, so commented-out text never looks like a declaration.
std::string strip_comments(const std::string& s) {
  return std::regex_replace(s, std::regex(R"(/\*[\s\S]*?\*/|//[^\n]*)"), "");
}

std::set<std::string> listed_names() {
  std::set<std::string> names;
  std::stringstream ss(arfAbiNames());
  for (std::string line; std::getline(ss, line);) names.insert(line);
  return names;
}

int64_t query(const std::string& name) {
  int64_t v = -1;
  EXPECT_EQ(arfAbiQuery(name.c_str(), &v), arfSuccess) << name;
  return v;
}

TEST(Abi, EveryStructFieldOfTheHeaderIsAnswered) {
  const std::string h = strip_comments(header_text());
  ASSERT_FALSE(h.empty()) << "cannot read include/arfusion/arfusion.h";
  const std::set<std::string> names = listed_names();
  const std::regex st(R"(typedef\s+struct\s+(\w+)\s*\{([^}]*)\}\s*(\w+)\s*;)");
  int structs = 0, fields = 0;
  for (auto it = std::sregex_iterator(h.begin(), h.end(), st); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[3];
    ++structs;
    EXPECT_TRUE(names.count(name)) << name;
    const std::string body = (*it)[2];
    const std::regex field(R"((\w+)\s*(\[[^\]]*\])?\s*;)");
    for (auto f = std::sregex_iterator(body.begin(), body.end(), field); f != std::sregex_iterator(); ++f) {
      ++fields;
      EXPECT_TRUE(names.count(name + "." + std::string((*f)[1]))) << name << "." << (*f)[1];
    }
  }
  // arfUniqueId, arfCommConfig_t, arfFusedArgs_t, arfPlan_t, arfPlanFacts_t, arfQuantBuffer_t,
  // arfQuantOutputs_t
  EXPECT_EQ(structs, 7);
  EXPECT_GE(fields, 68);  // the regex must see them all (58 in API version 5, 68 with the layout's)
}

TEST(Abi, EveryEnumConstantOfTheHeaderIsAnsweredWithItsValue) {
  const std::string h = strip_comments(header_text());
  const std::regex en(R"(typedef\s+enum\s+\w+\s*\{([^}]*)\})");
  int constants = 0;
  for (auto it = std::sregex_iterator(h.begin(), h.end(), en); it != std::sregex_iterator(); ++it) {
    const std::string body = (*it)[1];
    const std::regex c(R"((\w+)\s*=\s*(-?\d+))");
    for (auto m = std::sregex_iterator(body.begin(), body.end(), c); m != std::sregex_iterator(); ++m) {
      ++constants;
      EXPECT_EQ(query((*m)[1]), std::stoll((*m)[2])) << (*m)[1];
    }
  }
  EXPECT_GE(constants, 40);  // 38 in API version 4, 40 in 5 (arfFp8ScaleRule_t)
  EXPECT_EQ(query("ARF_API_VERSION"), ARF_API_VERSION);
}

TEST(Abi, ValuesAreTheCompilersAndUnknownNamesAreRefused) {
  EXPECT_EQ(query("arfFusedArgs_t"), static_cast<int64_t>(sizeof(arfFusedArgs_t)));
  EXPECT_EQ(query("arfFusedArgs_t.eps"), static_cast<int64_t>(offsetof(arfFusedArgs_t, eps)));
  EXPECT_EQ(query("arfFusedArgs_t.norm_rounding"),
            static_cast<int64_t>(offsetof(arfFusedArgs_t, norm_rounding)));
  EXPECT_EQ(query("arfFusedArgs_t.scale_rule"),
            static_cast<int64_t>(offsetof(arfFusedArgs_t, scale_rule)));
  EXPECT_EQ(query("arfFusedArgs_t.post_gamma"),
            static_cast<int64_t>(offsetof(arfFusedArgs_t, post_gamma)));
  EXPECT_EQ(query("arfFp8ScaleDivide"), 0);
  EXPECT_EQ(query("arfFp8ScaleTimesReciprocal"), 1);
  EXPECT_EQ(query("ARF_API_VERSION"), 6);
  EXPECT_EQ(query("arfCommConfig_t.max_ctas"),
            static_cast<int64_t>(offsetof(arfCommConfig_t, max_ctas)));
  EXPECT_EQ(query("arfPlanFacts_t.max_ctas"),
            static_cast<int64_t>(offsetof(arfPlanFacts_t, max_ctas)));
  EXPECT_EQ(listed_names().count("arfFusedArgs_t.scale_rule"), 1u);
  EXPECT_EQ(query("arfCommConfig_t.verify_calls"),
            static_cast<int64_t>(offsetof(arfCommConfig_t, verify_calls)));
  EXPECT_EQ(query("arfPlan_t.reason"), static_cast<int64_t>(offsetof(arfPlan_t, reason)));
  int64_t v = 0;
  EXPECT_EQ(arfAbiQuery("arfFusedArgs_t.no_such_field", &v), arfInvalidArgument);
  EXPECT_NE(std::string(arfGetLastErrorString()).find("no_such_field"), std::string::npos);
  EXPECT_EQ(arfAbiQuery(nullptr, &v), arfInvalidArgument);
}

}  // namespace
