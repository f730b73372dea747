// Harness of the GPU correctness suite. It drives a world of N ranks through the public C API only
// (arfusion.h), with one host thread and one CUDA stream per rank, as an engine would: ranks must
// run concurrently because a rank's kernel spins until its peers arrive.
//
// What makes a check able to catch silent cross-call corruption (docs/testing.md):
//  - data is distinct per rank AND per call (a stale peer buffer never holds the right bits);
//  - outputs are poisoned (0xFFFF, a NaN in both dtypes; 0xFBFB, finite, for NaN/Inf inputs)
//    before each call;
//  - calls are enqueued back-to-back with no host sync between them, optionally with host skew,
//    and each call's inputs are overwritten on the stream right after it (the vLLM/SGLang
//    "consumer" trick): a peer that still reads them after the call reads garbage;
//  - every output is compared with the CPU reference (all-reduce and residual_out bitwise,
//    norm_out within tolerance; NaN matches any NaN for NaN/Inf inputs only), across ranks
//    bitwise, and against a forced-`unfused` rerun bitwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "callkit/call_buffers.h"
#include "reference/cpu_reference.h"

namespace arf::test {

using callkit::ref_dtype;
const char* dtype_tag(arfDataType_t dtype);  // "bf16" / "fp16"
// "OneshotLamport" etc., for test names (the CamelCase form of arfAlgorithmName).
std::string algorithm_tag(arfAlgorithm_t algorithm);

// Records a gtest failure (from any thread) when a CUDA call fails; returns whether it succeeded.
bool cuda_ok(cudaError_t err, const char* what);
// "arfInvalidArgument: <last error string of this thread>"; call on the thread that got `status`.
std::string status_text(arfStatus_t status);
std::string plan_text(const arfPlan_t& plan);

// Turns a hang into a loud failure: if not destroyed within `seconds`, prints `what` and exits the
// process with status 1 (a spinning kernel cannot be cancelled, so a test cannot recover).
class HangGuard {
 public:
  HangGuard(double seconds, std::string what);
  ~HangGuard();
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// callkit::DeviceBuffer that records a gtest failure when its allocation fails.
class DeviceBuffer : public callkit::DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);
};

struct WorldOptions {
  int world_size = 2;
  arfDataType_t dtype = arfBFloat16;
  size_t max_tokens = 1024;
  size_t max_hidden = 8192;
  size_t oneshot_max_tokens = 0;  // 0 = max_tokens
  double timeout_seconds = 5.0;  // bounded waits: a protocol bug fails fast, it does not hang
  bool programmatic_launch = false;  // arfCommConfig_t::programmatic_launch (PDL)
  // Rank r's device; empty: test_devices(world_size).
  std::vector<int> devices;
  // Set: each rank is created on its own thread with arfCommInitRank, after this adjusts its
  // config (ranks that differ in a setting); unset: arfCommInitAll with one config.
  std::function<void(int rank, arfCommConfig_t* config)> per_rank;
};

// Devices of the ranks: ARF_TEST_DEVICES="0,1,..." (rank r gets entry r % count), else device 0
// for every rank (virtual ranks sharing one GPU).
std::vector<int> test_devices(int world_size);

// N ranks created with arfCommInitAll, one non-blocking stream each. Destroyed collectively.
class World {
 public:
  // nullptr, with a gtest failure recorded, when creation fails.
  static std::unique_ptr<World> create(const WorldOptions& options);
  ~World();

  int size() const { return options_.world_size; }
  arfDataType_t dtype() const { return options_.dtype; }
  const WorldOptions& options() const { return options_; }
  arfComm_t comm(int rank) const { return comms_[rank]; }
  cudaStream_t stream(int rank) const { return streams_[rank]; }
  int device(int rank) const { return devices_[rank]; }

  // Runs fn(rank) on one new host thread per rank, each with its device current, and joins them.
  void run_ranks(const std::function<void(int rank)>& fn) const;

 private:
  World() = default;
  WorldOptions options_;
  std::vector<int> devices_;
  std::vector<arfComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

// Legal in-place forms (arfusion.h): the call kit's.
using callkit::Alias;
using callkit::kAllReduceInPlace;
using callkit::kNoAlias;
using callkit::kNormIntoInput;
using callkit::kResidualInPlace;

// What the inputs hold. kRandom is ref::fill_random (1/64 special values); the next three stress
// the Lamport sentinel (-0.0) and what a flush-to-zero would turn into it. kNanInf is random data
// with NaN and +-Inf in the inputs of some ranks and in residual_in (edge_values.h: which rows and
// columns, and the semantics the checks assert); only for it does a NaN output match a NaN
// reference, and its outputs are poisoned with a finite value instead of NaN.
enum class Content { kRandom, kAllNegativeZero, kAllNegativeSubnormal, kSentinelMix, kNanInf };

// The kit's call spec (tests/gpu uses the unquantized patterns; quant_harness.h the others) and
// what its inputs hold.
struct CallSpec : callkit::CallSpec {
  Content content = Content::kRandom;
  std::string label() const;  // the kit's label, and the content when not random
};

// Host inputs of one call: callkit::make_call_data, then the spec's content applied on top.
using callkit::CallData;
using callkit::mix_seed;

// Seed of the current test (a hash of its full name), so every test draws its own data.
uint64_t test_seed();
CallData make_call_data(const CallSpec& spec, int world_size, arfDataType_t dtype, uint64_t seed);
// One CallData per spec, generated in parallel; call c uses mix_seed(base_seed, c).
std::vector<CallData> make_all_call_data(const std::vector<CallSpec>& specs, int world_size,
                                         arfDataType_t dtype, uint64_t base_seed);

using callkit::RankOutputs;
using CallResult = std::vector<RankOutputs>;  // [rank]

// callkit::CallBuffers (one call's device buffers on one rank, the spec's aliasing applied) whose
// failures are gtest failures. Outputs are poisoned with 0xFF (NaN in every dtype), or with
// kFinitePoisonByte for the kNanInf content, where a NaN output is expected and a NaN poison
// could pass.
class CallBuffers : public callkit::CallBuffers {
 public:
  CallBuffers(int device, const CallSpec& spec, arfDataType_t dtype)
      : CallBuffers(device, spec, dtype, spec.content) {}
  CallBuffers(int device, const callkit::CallSpec& spec, arfDataType_t dtype, Content content);
  // Copies the rank's inputs (stream-ordered) and poisons every output that is not an input.
  void upload(const CallData& data, int rank, cudaStream_t stream) const;
  // Overwrites the inputs that are not also outputs (the consumer trick), stream-ordered.
  void clobber_inputs(cudaStream_t stream) const;
  RankOutputs download(cudaStream_t stream) const;  // synchronizes `stream`

 private:
  Content content_;
};

struct RunOptions {
  bool clobber_inputs = true;  // overwrite inputs right after each call
  int max_skew_us = 0;         // each rank sleeps up to this long before each call
  double hang_seconds = 120;   // HangGuard bound for the whole batch
  // Zero-copy inputs (arfCommGetInputBuffer): where this returns true for (rank, call), the rank
  // copies the call's input into its communicator's input buffer on its stream just before the
  // call and passes the buffer as the input; clobber_inputs then garbages the buffer right after
  // the call (a peer still reading it afterwards would read garbage). Null: never.
  std::function<bool(int rank, size_t call)> input_in_buffer;
};

// Enqueues all calls back-to-back on every rank (no host sync between calls), then synchronizes,
// checks statuses and arfCommGetAsyncError, and downloads every output. Results are [call][rank].
std::vector<CallResult> run_calls(const World& world, const std::vector<CallSpec>& specs,
                                  const std::vector<CallData>& data, const RunOptions& options);

// Reference (bitwise / tolerance) and cross-rank bitwise checks; gtest failures name the call.
void check_calls(const World& world, const std::vector<CallSpec>& specs,
                 const std::vector<CallData>& data, const std::vector<CallResult>& results);

// A sandwich call's residual_out and norm_out against the reference (arfusion.h, Numerics):
// residual_out within the interval the post-norm's tolerance allows
// (ref::first_sandwich_residual_mismatch), norm_out (when not null) within tolerance of the exact
// norm of that very residual_out. "" when both pass, else the failures. `want` is
// ref::reference_fused(in).
std::string sandwich_mismatch(const ref::FusedInputs& in, const ref::FusedOutputs& want,
                              const uint16_t* residual_out, const uint16_t* norm_out);

// Every output of `b` bitwise equal to `a` ([call][rank]); `what` names the comparison.
void check_identical(const std::vector<CallSpec>& specs, const std::vector<CallResult>& a,
                     const std::vector<CallResult>& b, const char* what);

// The usual test: fresh data seeded from the test name, run, check, then rerun the same data with
// every fused call forced to `unfused` and require bitwise-identical outputs.
void run_and_check(const World& world, const std::vector<CallSpec>& specs,
                   const RunOptions& options = {}, uint64_t salt = 0);

// Runs fn(i) for i in [0, n) on up to hardware_concurrency threads.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace arf::test
