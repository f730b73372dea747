// From a CallSpec and one rank's tensors to (a) the arfFusedArgs_t / arfAllReduce arguments the
// library gets and (b) the DeviceCall our kernels get — in ONE place, so the aliasing the library
// sees and the aliasing our kernels assume cannot drift apart. Host only, no CUDA call: the CPU
// tests check the rules below with fake pointers.
//
// Rules:
//  - allreduce / flat: out = input when allreduce_out_is_input, else allreduce_out;
//  - norm patterns: residual_in = NULL when residual_null, residual_out = residual_in when in place,
//    norm_out = input when norm_out_is_input; quantized patterns always get norm_out (side output,
//    checked), quant_out, scale_out when the pattern writes scales, scale_in when it reads one;
//  - an input buffer that is also an output of the call is never overwritten with garbage
//    (input_is_output, residual_is_output); gamma and scale_in always are.
#pragma once

#include <cstdint>

#include "arfusion/arfusion.h"
#include "call_spec.h"
#include "kernels.h"

namespace arf::churn {

struct TensorSet {
  uint16_t* input = nullptr;
  uint16_t* residual_in = nullptr;
  uint16_t* residual_out = nullptr;
  uint16_t* norm_out = nullptr;
  uint16_t* allreduce_out = nullptr;
  void* gamma = nullptr;
  uint8_t* quant_out = nullptr;
  uint8_t* scale_out = nullptr;
  float* scale_in = nullptr;
};

struct FlatArgs {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
};

// The library's arguments (arfFusedAllReduce; unused for flat calls).
arfFusedArgs_t fused_args(const CallSpec& c, arfDataType_t dtype, const TensorSet& t);
FlatArgs flat_args(const CallSpec& c, const TensorSet& t);

struct RunConstants {
  uint64_t seed = 1;
  uint32_t skew_us = 0;
  arfDataType_t dtype = arfBFloat16;
};

// Our kernels' view of the same call; table/counters/mirror are filled by the caller.
DeviceCall device_call(const CallSpec& c, const RunConstants& k, uint32_t rank, uint32_t world,
                       const TensorSet& t);

}  // namespace arf::churn
