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
//    post_gamma only for a sandwich call (NULL otherwise, as a version 1-5 caller passes it);
//  - an input buffer that is also an output of the call is never overwritten with garbage
//    (input_is_output, residual_is_output); gamma, post_gamma and scale_in always are;
//  - reference: which of the call's rows this rank recomputes the expected outputs of
//    (reference_units).
#pragma once

#include <cstdint>

#include "arfusion/arfusion.h"
#include "call_spec.h"
#include "kernels.h"

namespace arf::stress {

struct TensorSet {
  uint16_t* input = nullptr;
  uint16_t* input_buffer = nullptr;  // the communicator's (arfCommGetInputBuffer); never the default
  uint16_t* residual_in = nullptr;
  uint16_t* residual_out = nullptr;
  uint16_t* norm_out = nullptr;
  uint16_t* allreduce_out = nullptr;
  void* gamma = nullptr;
  void* post_gamma = nullptr;  // sandwich calls' (same dtype and length as gamma)
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
  ReferenceMode reference = ReferenceMode::kRotate;  // --reference
};

// Which units of call `c` (rows; flat/allreduce: chunks of kFlatReferenceChunk elements, kernels.h)
// `rank` recomputes the expected outputs of from every rank's inputs (the check kernel's costly
// part: world hashes per element): unit j when j % stride == phase (stride 0: none). A call whose
// outputs must match across ranks is recomputed once in all: under rotate wholly on rank
// call % world (each rank takes its turn and sees every pattern and shape), under split unit j on
// rank (j + call) % world (the cost spread over the ranks, so no rank's check trails the others';
// a call's first rows start on a different rank each call). Every rank hashes all its outputs, and
// the cross-rank comparison of the hashes (cross_rank.h) proves them bitwise equal to the checked
// ones. Calls with per-rank residual/gamma (outputs differ by rank), and every call under
// --reference all, are recomputed wholly on every rank. Cheap checks that read only the rank's own
// outputs (quantization codes and scales against its norm_out, scale padding) run on every rank
// regardless.
struct ReferenceUnits {
  uint32_t stride = 1;
  uint32_t phase = 0;
  bool covers(int64_t unit) const { return stride != 0 && static_cast<uint64_t>(unit) % stride == phase; }
};
ReferenceUnits reference_units(const CallSpec& c, const RunConstants& k, uint32_t rank, uint32_t world);

// Whether `rank` passes call `c`'s input in its communicator's input buffer (arfCommGetInputBuffer)
// instead of its own input tensor: a draw per (call, rank) from the seed, true for about `percent`
// of them, so ranks differ (the library must give the same bits either way); never when an output
// aliases the input (the header refuses that form with the buffer). The caller then swaps
// TensorSet::input for input_buffer: the generate kernel writes the input there, the overwrite
// kernel garbages it right behind the call.
bool input_in_buffer(const CallSpec& c, uint64_t seed, uint32_t rank, int percent);

// Our kernels' view of the same call; table/counters/mirror are filled by the caller.
DeviceCall device_call(const CallSpec& c, const RunConstants& k, uint32_t rank, uint32_t world,
                       const TensorSet& t);

}  // namespace arf::stress
