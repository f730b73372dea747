// Stand-in (see ../../../README.md): the torch::stable::Tensor members ops_stable.cc calls.
#pragma once
#include <cstdint>
#include <torch/headeronly/core/ScalarType.h>
namespace torch::stable {
class Tensor {
 public:
  void* data_ptr() const;
  int64_t dim() const;
  int64_t numel() const;
  int64_t size(int64_t dim) const;
  bool is_contiguous() const;
  bool is_cuda() const;
  int32_t get_device_index() const;
  torch::headeronly::ScalarType scalar_type() const;
};
}  // namespace torch::stable
