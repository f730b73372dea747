// The call kit's device side: one rank's buffers of one call, allocated for its spec (only the
// tensors the call uses, none for an aliased output), with the three stream-ordered steps every
// checking user needs around the call:
//  - upload: this rank's inputs in, every output poisoned (0xFF: NaN in bf16, fp16, e4m3 and fp32,
//    UE8M0's NaN, e2m1 -6 pairs; scale padding included, which the kernels must write as zero), so
//    an output the kernel never wrote cannot pass;
//  - clobber_inputs: the "consumer" trick (as the vLLM/SGLang tests do): every input that is not
//    also an output is overwritten right behind the call (0x5A..: large finite values), so a peer
//    that still reads it after the call reads garbage;
//  - download: every output back to the host.
//
// Errors come back as text ("" = success; the first failure names the CUDA call), so that a gtest
// harness, a forked rank process and a tool each report them their own way. Allocation happens in
// the constructor: with ranks sharing a GPU, create every buffer before any rank launches (a
// cudaMalloc waits for the device, i.e. for a peer's spinning kernel). Addresses stay fixed, so
// graphs may capture them. Not thread-safe; one thread per rank.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "callkit/call_data.h"
#include "callkit/call_spec.h"

namespace arf::callkit {

inline constexpr int kPoisonByte = 0xFF;
inline constexpr int kClobberByte = 0x5A;

// cudaMalloc'd memory on one device, freed there on destruction (the current device is restored).
// bytes 0: no allocation, get() NULL. A failed allocation leaves get() NULL and error() set.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  void* get() const { return ptr_; }
  uint16_t* u16() const { return static_cast<uint16_t*>(ptr_); }
  size_t bytes() const { return ptr_ == nullptr ? 0 : bytes_; }
  const std::string& error() const { return error_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
  std::string error_;
};

// One rank's copy of every output of a call; empty vectors for outputs the call does not write.
struct RankOutputs {
  std::vector<uint16_t> allreduce, residual_out, norm_out;
  std::vector<uint8_t> quant_out, scale_out;
};

class CallBuffers {
 public:
  // Allocates on `device` (made current). error() names the first failed allocation.
  CallBuffers(int device, const CallSpec& spec, arfDataType_t dtype);
  CallBuffers(const CallBuffers&) = delete;
  CallBuffers& operator=(const CallBuffers&) = delete;

  const std::string& error() const { return error_; }
  const CallSpec& spec() const { return spec_; }

  // Copies rank `rank`'s inputs of `data` (and scale_in), then fills every output with
  // `poison_byte`. Stream-ordered; `data` must stay alive until the stream has run the copies.
  std::string upload(const CallData& data, int rank, cudaStream_t stream,
                     int poison_byte = kPoisonByte) const;
  // Every allocated tensor, unaliased; fused_args picks and aliases.
  CallTensors tensors() const;
  arfFusedArgs_t args() const { return fused_args(spec_, dtype_, tensors()); }
  // launch_call on these buffers: arfFusedAllReduce, or arfAllReduce for flat specs.
  arfStatus_t launch(arfComm_t comm, cudaStream_t stream) const;
  // Stream-ordered overwrite of every input that is not also an output (gamma and scale_in too).
  std::string clobber_inputs(cudaStream_t stream) const;
  // Synchronizes `stream`, then copies every output the call writes into *out.
  std::string download(cudaStream_t stream, RankOutputs* out) const;

  // The pointers the call passes (aliases resolved; NULL where it passes none).
  void* input() const { return input_.get(); }
  void* residual_in() const { return residual_in_.get(); }
  void* gamma() const { return gamma_.get(); }
  void* post_gamma() const { return post_gamma_.get(); }
  void* allreduce_out() const { return args().allreduce_out; }
  void* residual_out() const { return args().residual_out; }
  void* norm_out() const { return args().norm_out; }

 private:
  CallSpec spec_;
  arfDataType_t dtype_;
  float scale_in_value_ = 0.0f;  // a member: cudaMemcpyAsync may read it after upload returns
  DeviceBuffer input_, residual_in_, gamma_, post_gamma_, allreduce_out_, residual_out_, norm_out_,
      quant_out_, scale_out_, scale_in_;
  std::string error_;
};

}  // namespace arf::callkit
