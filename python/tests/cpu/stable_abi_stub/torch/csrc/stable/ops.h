// Stand-in (see ../../../README.md): the torch::stable ops ops_stable.cc calls.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>
#include <torch/csrc/stable/tensor.h>
namespace torch::stable {
class IntArrayStandIn {  // torch::headeronly::IntHeaderOnlyArrayRef's constructors used here
 public:
  IntArrayStandIn(const std::vector<int64_t>& v);
  IntArrayStandIn(std::initializer_list<int64_t> v);
};
Tensor contiguous(const Tensor& self);
Tensor new_empty(const Tensor& self, IntArrayStandIn size,
                 std::optional<torch::headeronly::ScalarType> dtype = std::nullopt);
}  // namespace torch::stable
