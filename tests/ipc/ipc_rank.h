// What one rank process of tests/ipc does on its GPU: create its ipc communicator, generate the
// calls' data, enqueue calls, and check every output against the CPU reference
// (src/reference/). Runs in forked children only (ipc_test_util.h): every function here may call
// CUDA, and reports failures through RankContext::fail instead of gtest.
//
// The checks follow the GPU suite's rules (tests/gpu/harness.h), restated for processes:
//  - data distinct per rank and per call (ref::fill_random, seeds mixing call and rank), never
//    all zero; every child generates EVERY rank's inputs from the same seeds, so it computes the
//    full reference locally and no data crosses between processes;
//  - outputs poisoned before each call (0xFF: NaN in bf16/fp16/e4m3/fp32), inputs overwritten
//    on the stream right after each call (a peer still reading them late reads garbage);
//  - all-reduce and residual_out bitwise equal to the reference, norm_out within
//    ref::norm_within_tolerance, FP8 quant_out/scale_out exactly ref::quantize_reference of the
//    kernel's own norm_out;
//  - cross-rank bitwise identity: each output's hash is published, and the parent compares them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "callkit/call_buffers.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {

// Capacity of every communicator of the suite: room for the largest call (257 tokens) with
// Lamport buffers of 3 x world x 512 x 4096 elements (48 MiB at world 4).
inline constexpr size_t kMaxTokens = 512;
inline constexpr size_t kMaxHidden = 4096;
// Bound of the device waits in the correctness scenarios. Ranks of different processes on one
// GPU time-slice, so a wait can take a scheduler slice (milliseconds) or several; 20 s is far
// beyond that and still well inside the parent's deadline.
inline constexpr double kDeviceTimeoutSeconds = 20.0;
inline constexpr double kInitTimeoutSeconds = 30.0;

std::string status_text(arfStatus_t status);  // "arfTimeout: <last error string>"
std::string plan_text(const arfPlan_t& plan);

// ---- setup -----------------------------------------------------------------------------------

// Makes the rank's device current and creates its context now, so that the timings of library
// calls measured afterwards do not include context creation.
bool init_device(RankContext& ctx);
bool cuda_ok(RankContext& ctx, cudaError_t err, const std::string& what);

// transport ipc, the slot's rank/world/id, device_for_rank, the capacity and timeouts above.
arfCommConfig_t ipc_config(const RankContext& ctx, arfDataType_t dtype);
// arfCommInitRank; nullptr (after ctx.fail naming the status and message) when it fails.
arfComm_t init_comm(RankContext& ctx, const arfCommConfig_t& config);
// arfCommDestroy: must return arfSuccess unless this rank already failed a check.
void destroy_comm(RankContext& ctx, arfComm_t comm);
cudaStream_t make_stream(RankContext& ctx);  // non-blocking (capturable); nullptr on failure

// ---- calls -----------------------------------------------------------------------------------

// One call: the call kit's spec, data and outputs. Patterns here: allreduce, residual_rmsnorm,
// residual_rmsnorm_fp8_per_token, unaliased. The data is callkit::make_call_data: rank r's input
// from mix_seed(seed, r + 1), residual and gamma replicated, as the GPU suite draws it.
using callkit::CallData;
using callkit::CallSpec;
using callkit::make_call_data;
using callkit::RankOutputs;

// callkit::CallBuffers on the current device, failures reported through the rank's context.
class CallBuffers : public callkit::CallBuffers {
 public:
  // nullptr, after ctx.fail, when an allocation fails (or a quantized call would get no scales).
  static std::unique_ptr<CallBuffers> create(RankContext& ctx, const CallSpec& spec,
                                             arfDataType_t dtype);

  // Stream-ordered: copies this rank's inputs, poisons every output.
  bool upload(RankContext& ctx, const CallData& data, cudaStream_t stream) const;
  // Stream-ordered overwrite of the inputs (0x5A..., large finite values): the consumer trick.
  bool clobber_inputs(RankContext& ctx, cudaStream_t stream) const;
  // Synchronizes `stream`, then copies every output to the host.
  bool download(RankContext& ctx, cudaStream_t stream, RankOutputs* out) const;

 private:
  CallBuffers(int device, const CallSpec& spec, arfDataType_t dtype)
      : callkit::CallBuffers(device, spec, dtype) {}
};

// "" when every output of the call matches the reference; else one line per wrong output with
// the first mismatching row and column.
std::string check_outputs(const CallSpec& spec, arfDataType_t dtype, const CallData& data,
                          const RankOutputs& got);

// Publishes a hash of each output under "<key_prefix><name>" (salted with salt), for the
// parent's cross-rank comparison.
void publish_outputs(const RankContext& ctx, const std::string& key_prefix, uint64_t salt,
                     const RankOutputs& got);

// arfPlan of the call (not for flat specs): must succeed and agree with the spec (a forced
// algorithm runs, level 3 exactly for unfused quantized calls, fused = one kernel, ...). Its
// hash is published under `key` so that the parent checks every rank got the same plan.
void check_and_publish_plan(RankContext& ctx, arfComm_t comm, const CallBuffers& buffers,
                            const CallSpec& spec, const std::string& key);

// The usual batch: data for every call (call c from mix_seed(seed, c)), buffers allocated and
// uploaded, plans checked, then every call enqueued back to back on `stream` (each followed by the
// overwrite of its inputs), one synchronization, arfCommGetAsyncError, and every output checked
// and published as "<key_prefix>call <c> <output>". Failures name the call and its spec.
// Returns false when the ranks can no longer be in step (a CUDA error, a refused launch, a failed
// communicator); wrong outputs are failures of ctx but leave the communicator usable (true).
bool run_checked_batch(RankContext& ctx, arfComm_t comm, cudaStream_t stream,
                       arfDataType_t dtype, const std::vector<CallSpec>& specs, uint64_t seed,
                       const std::string& key_prefix = "");

}  // namespace arf::ipc_test
