// Device buffers of one rank: inputs rotated among several sets (so timed calls do not re-read the
// previous call's input out of L2), one set of outputs, and gamma.
//
// What tensor parallelism replicates is replicated here too: residual_in and gamma hold the same
// values on every rank (the reference takes one of each, and outputs must then be bitwise identical
// across ranks); input holds distinct data per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "callkit/call_data.h"
#include "export/tool_api.h"

namespace arf::bench {

inline constexpr int kMaxInputSets = 4;

using callkit::ref_dtype;

struct RankBuffers {
  int64_t capacity_elems = 0;  // elements of every [tokens, hidden] buffer
  int64_t hidden = 0;
  arfDataType_t dtype = arfBFloat16;
  std::vector<void*> input;        // [num sets]
  bool input_is_comm_buffer = false;  // --input-buffer: input[0] is the communicator's (not freed)
  std::vector<void*> residual_in;  // [num sets]; empty for --op allreduce
  void* allreduce_out = nullptr;
  void* residual_out = nullptr;
  void* norm_out = nullptr;
  void* gamma = nullptr;
  // --op quant only (allocate_quant_buffers): e4m3 / packed e2m1 output, scale output, and the two
  // scale_in values [kStaticScale, kGlobalScale].
  void* quant_out = nullptr;
  void* scale_out = nullptr;
  float* scale_in = nullptr;

  int num_sets() const { return static_cast<int>(input.size()); }
};

// Deterministic seeds for fill_random: input differs per rank and per call; residual and gamma
// differ per call only, so that they are replicated across ranks.
uint64_t input_seed(int rank, uint64_t call);
uint64_t replicated_seed(uint64_t call, uint64_t salt);

// The gamma every rank holds (replicated weights), on the host; the check's reference uses it too.
std::vector<uint16_t> gamma_values(int64_t hidden, arfDataType_t dtype);

// How many input sets fit in a quarter of the device's free memory (1..kMaxInputSets), given the
// bytes of one set and how many ranks share the device. Call on a thread whose device is current.
int affordable_input_sets(int64_t set_bytes, int ranks_on_device);

// Allocates on the current device, fills inputs, residuals and gamma with random data (the same
// values in every input set) and zeroes the outputs. Returns "" or the failure.
std::string allocate_buffers(int rank, int64_t capacity_elems, int64_t hidden, arfDataType_t dtype,
                             int num_sets, bool with_residual, cudaStream_t stream,
                             RankBuffers* buffers);
void free_buffers(RankBuffers* buffers);

// What --op quant's per-tensor FP8 and NVFP4 calls read from scale_in: the call kit's values, as
// the GPU tests use them (callkit/call_spec.h says why these).
using callkit::kGlobalScale;
using callkit::kStaticScale;

// Allocates the quant outputs (zeroed) and scale_in (uploaded) on the current device; called with
// the other allocations, before any rank launches. Returns "" or the failure.
std::string allocate_quant_buffers(int64_t quant_bytes, int64_t scale_bytes, cudaStream_t stream,
                                   RankBuffers* buffers);

// --input-buffer: copies the (single) input set into the communicator's input buffer, frees the
// set and points input[0] at the buffer. Returns "" or the failure (a buffer smaller than the
// sweep's capacity included).
std::string move_input_to_comm_buffer(arfComm_t comm, int64_t capacity_elems, cudaStream_t stream,
                                      RankBuffers* buffers);

// Host -> device copy of host.size() elements into dst, synchronous on `stream`.
std::string upload(void* dst, const std::vector<uint16_t>& host, cudaStream_t stream);
// Device -> host copy of `count` elements, synchronous on `stream`.
std::string download(const void* src, int64_t count, cudaStream_t stream,
                     std::vector<uint16_t>* host);
std::string download_bytes(const void* src, int64_t bytes, cudaStream_t stream,
                           std::vector<uint8_t>* host);

}  // namespace arf::bench
