// The soak's own ("foreign") kernels around every collective, on the rank's stream:
//   generate  -> the arfusion call -> overwrite -> check
//  - generate: spins on %globaltimer for the (call, rank) delay (data_gen.h skew_ns), then writes
//    fresh input, residual_in, gamma, post_gamma (sandwich calls) and *scale_in, and fills scale_out with 0xA5 (so padding the
//    library must zero cannot pass by accident);
//  - overwrite: garbage into every input buffer that is not also an output of the call (a reader
//    that is late, i.e. a protocol slip, then sees garbage);
//  - check: recomputes every expected output from the hash (every rank's inputs), counts wrong
//    elements, records the first, adds the call's output hash to the table (counters.h); for the
//    rows (chunks) this rank does not recompute (call_args.h reference_units) it only hashes the
//    outputs and runs the checks that need no other rank's data.
// All three can have a LARGE per-CTA footprint (block threads and dynamic shared memory from
// --foreign-block / --foreign-smem-kb): with ranks sharing a GPU, such a CTA may not fit on an SM
// beside a collective's CTAs, which is the co-scheduling hazard the soak exists to exercise.
// None of them waits for anything but its own delay, so they never deadlock by themselves.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "counters.h"
#include "hd.h"

namespace arf::stress {

// Everything the kernels know about one call on one rank (passed by value).
struct DeviceCall {
  uint64_t seed = 0;
  uint64_t call = 0;            // issued index: the data key and the table slot (mod table size)
  uint32_t rank = 0;
  uint32_t world = 1;
  uint32_t pattern = 0;         // Pat
  uint32_t fp16 = 0;            // activation dtype: 0 bf16, 1 fp16
  uint32_t gamma_fp32 = 0;
  uint32_t gamma_plus_one = 0;
  uint32_t per_rank = 0;        // per-rank residual/gamma
  uint32_t residual_null = 0;
  uint32_t before_weight = 0;   // arfNormRoundBeforeWeight
  uint32_t sandwich = 0;        // post_gamma set (numerics.h sandwich_residual_ok)
  uint32_t layout = 0;          // ScaleLayoutId
  uint32_t format = 0;          // arfScaleFormat_t (FP8 per-group)
  uint32_t comparable = 1;      // outputs must match across ranks
  // Which units (rows; flat/allreduce: kFlatReferenceChunk-element chunks) this rank recomputes
  // the expected outputs of: unit j when ref_stride != 0 and j % ref_stride == ref_phase
  // (reference_unit; call_args.h reference_units says who checks what).
  uint32_t ref_stride = 1;
  uint32_t ref_phase = 0;
  uint32_t skew_us = 0;
  uint32_t input_is_output = 0;     // allreduce_out / norm_out alias input: do not overwrite it
  uint32_t residual_is_output = 0;  // residual in place: do not overwrite residual_in
  int64_t tokens = 0;
  int64_t hidden = 0;
  int64_t count = 0;            // elements of input (tokens * hidden, or the flat count)
  int64_t scale_bytes = 0;      // arfScaleBufferBytes of the call (0: no scale_out)
  float eps = 1e-6f;

  uint16_t* input = nullptr;
  uint16_t* residual_in = nullptr;   // NULL when residual_null
  const uint16_t* residual_out = nullptr;
  const uint16_t* norm_out = nullptr;
  const uint16_t* allreduce_out = nullptr;
  void* gamma = nullptr;
  void* post_gamma = nullptr;   // sandwich calls only; gamma's dtype and length
  const uint8_t* quant_out = nullptr;
  uint8_t* scale_out = nullptr;
  float* scale_in = nullptr;

  TableEntry* table = nullptr;  // this rank's table
  uint64_t table_calls = 1;
  DeviceCounters* counters = nullptr;
  PinnedMirror* mirror = nullptr;  // device pointer of the pinned mirror
};

// Elements per reference unit of the flat and allreduce patterns (rows of the norm patterns are
// units of their own: a row's norm needs its whole expected residual).
inline constexpr int64_t kFlatReferenceChunk = 1024;

STRESS_HD inline bool reference_unit(const DeviceCall& c, int64_t unit) {
  return c.ref_stride != 0 && static_cast<uint64_t>(unit) % c.ref_stride == c.ref_phase;
}

struct ForeignShape {
  int block = 1024;      // threads per CTA
  int smem_bytes = 0;    // dynamic shared memory per CTA
  int grid = 0;          // CTAs of generate/overwrite (0: SM count, resolved at setup)
};

// Raises the dynamic shared memory limit of the three kernels on the current device and checks
// that one CTA of each fits on an SM. "" on success, else why not.
std::string prepare_foreign_kernels(const ForeignShape& shape);

// Enqueue on `stream`; return cudaGetLastError() of the launch.
cudaError_t launch_generate(const DeviceCall& c, const ForeignShape& s, cudaStream_t stream);
cudaError_t launch_overwrite(const DeviceCall& c, const ForeignShape& s, cudaStream_t stream);
cudaError_t launch_check(const DeviceCall& c, const ForeignShape& s, int sm_count, cudaStream_t stream);

// --corrupt-every (self_test.h): one thread flips a bit of output `output` (CorruptOutput) of the
// call in its first row or chunk, right after the library wrote it (a call without that output:
// the all-reduce or residual_out instead). An exponent bit, so no tolerance accepts the result.
cudaError_t launch_corrupt(const DeviceCall& c, int output, cudaStream_t stream);

// One launch of each kernel with nothing to do (warm-up: loads the module before any collective,
// since a lazy load while a peer's collective spins could wait for it).
cudaError_t warm_up_foreign_kernels(const ForeignShape& s, cudaStream_t stream);

}  // namespace arf::stress
