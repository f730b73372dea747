// The call kit's host data: what one call's ranks feed it, and the CPU reference's view of it.
//
// What makes the data able to catch a protocol bug: inputs are distinct per rank AND per call (a
// stale peer buffer never holds the right bits) and never all zero (ref::fill_random: about 1/64
// of the elements are +-0.0 or negative subnormals, the Lamport sentinel's neighbours). residual
// and gamma are replicated across ranks, as tensor parallelism replicates them, so every rank's
// outputs must be bitwise identical. Every rank process can generate EVERY rank's inputs from the
// same seed, so a process computes the full reference locally and no data crosses processes.
// Host only, no CUDA call; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "callkit/call_spec.h"
#include "export/reference_api.h"

namespace arf::callkit {

// The reference's dtype of a C API dtype (bf16, fp16, fp32: numbered alike).
DType ref_dtype(arfDataType_t dtype);

// splitmix64 of a combination of a and b: seeds for calls (mix_seed(seed, call)) and ranks.
uint64_t mix_seed(uint64_t a, uint64_t b);

// Host inputs of one call.
struct CallData {
  std::vector<std::vector<uint16_t>> inputs;  // [rank][elems], distinct per rank
  std::vector<uint16_t> residual_in;          // [elems], replicated (norm patterns only)
  std::vector<uint16_t> gamma16;              // [hidden] in the dtype (when !gamma_fp32)
  std::vector<float> gamma32;                 // [hidden] (when gamma_fp32)
  std::vector<uint16_t> post_gamma16;         // sandwich calls: post_gamma, as gamma16 / gamma32
  std::vector<float> post_gamma32;
};

// Deterministic from `seed`: rank r's input from mix_seed(seed, r + 1), residual and gamma from
// seeds no rank index reaches (1001, 1002; post_gamma 1003). gamma is 1 + 0.1 x for random x (x
// alone with gamma_plus_one, where the kernel adds the 1); fp32 gamma uses 0.1003, a full mantissa
// that a rounding to the dtype would show. post_gamma is drawn the same way with 0.25 (0.2503):
// another spread, so a kernel that read gamma for it would be caught.
CallData make_call_data(const CallSpec& spec, int world, arfDataType_t dtype, uint64_t seed);

// The reference's inputs for `spec` on `data` (pointers into `data`, which must outlive them).
ref::FusedInputs reference_inputs(const CallSpec& spec, arfDataType_t dtype, const CallData& data);

}  // namespace arf::callkit
