// Stand-in (see ../../../README.md): the torch::stable::Tensor members ops_stable.cc calls.
#pragma once
#include <cstdint>
#include <torch/headeronly/core/ScalarType.h>
// The C shim (torch/csrc/inductor/aoti_torch/c/shim.h, included by the real tensor.h): the calls
// ops_stable.cc makes directly.
struct AtenTensorOpaque;
using AtenTensorHandle = AtenTensorOpaque*;
using AOTITorchError = int32_t;
extern "C" {
AOTITorchError aoti_torch_get_dtype(AtenTensorHandle tensor, int32_t* ret_dtype);
int32_t aoti_torch_device_type_cuda();
AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes_ptr, const int64_t* strides_ptr,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AtenTensorHandle* ret_new_tensor);
}
namespace torch::stable {
class Tensor {
 public:
  explicit Tensor(AtenTensorHandle ath);  // takes ownership
  AtenTensorHandle get() const;           // borrowed
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
