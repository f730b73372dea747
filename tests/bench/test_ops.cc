// The op table (bench/ops.h): one descriptor per Op, in Op order, each complete.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ops.h"

namespace arf::bench {
namespace {

TEST(BenchOps, OneCompleteDescriptorPerOpInOrder) {
  std::set<std::string> names;
  for (size_t i = 0; i < op_descriptors().size(); ++i) {
    const OpDescriptor& d = op_descriptors()[i];
    EXPECT_EQ(static_cast<size_t>(d.op), i) << d.name;
    EXPECT_EQ(&op_descriptor(d.op), &d);
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate name " << d.name;
    EXPECT_NE(d.shapes, nullptr) << d.name;
    EXPECT_NE(d.columns, nullptr) << d.name;
    EXPECT_NE(d.measure_row, nullptr) << d.name;
    EXPECT_NE(d.print_table_header, nullptr) << d.name;
    EXPECT_NE(d.print_row, nullptr) << d.name;
    EXPECT_NE(d.row_label, nullptr) << d.name;
  }
  EXPECT_EQ(op_descriptors().size(), 4u);
}

TEST(BenchOps, CopyBandwidthRule) {
  EXPECT_TRUE(measures_copy_bandwidth(op_descriptor(Op::kEpilogue), 1));
  EXPECT_TRUE(measures_copy_bandwidth(op_descriptor(Op::kQuant), 1));
  EXPECT_FALSE(measures_copy_bandwidth(op_descriptor(Op::kQuant), 2));
  EXPECT_FALSE(measures_copy_bandwidth(op_descriptor(Op::kFused), 1));
}

}  // namespace
}  // namespace arf::bench
