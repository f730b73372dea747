// Allocation and random fill of one rank's benchmark buffers.
#include "buffers.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "export/reference_api.h"

namespace arf::bench {
namespace {

// splitmix64 finaliser: spreads (rank, call, salt) into well-separated seeds for fill_random.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string cuda_message(cudaError_t err, const char* what) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

std::string alloc(int64_t bytes, void** ptr) {
  cudaError_t err = cudaMalloc(ptr, static_cast<size_t>(bytes));
  return err == cudaSuccess ? "" : cuda_message(err, "cudaMalloc");
}

std::string alloc_filled(const std::vector<uint16_t>& host, cudaStream_t stream, void** ptr) {
  std::string why = alloc(static_cast<int64_t>(host.size() * sizeof(uint16_t)), ptr);
  return why.empty() ? upload(*ptr, host, stream) : why;
}

}  // namespace

uint64_t input_seed(int rank, uint64_t call) { return mix(mix(call) ^ (rank + 1)); }
uint64_t replicated_seed(uint64_t call, uint64_t salt) { return mix(mix(call) ^ (salt << 32)); }

std::vector<uint16_t> gamma_values(int64_t hidden, arfDataType_t dtype) {
  std::vector<uint16_t> gamma(hidden);
  ref::fill_random(gamma.data(), hidden, ref_dtype(dtype), replicated_seed(0, 2));
  return gamma;
}

int affordable_input_sets(int64_t set_bytes, int ranks_on_device) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 1;
  const int64_t budget = static_cast<int64_t>(free_bytes / 4) / std::max(1, ranks_on_device);
  return static_cast<int>(
      std::clamp<int64_t>(budget / std::max<int64_t>(1, set_bytes), 1, kMaxInputSets));
}

std::string allocate_buffers(int rank, int64_t capacity_elems, int64_t hidden, arfDataType_t dtype,
                             int num_sets, bool with_residual, cudaStream_t stream,
                             RankBuffers* b) {
  b->capacity_elems = capacity_elems;
  b->hidden = hidden;
  b->dtype = dtype;
  const DType dt = ref_dtype(dtype);
  const int64_t bytes = capacity_elems * static_cast<int64_t>(sizeof(uint16_t));
  std::vector<uint16_t> host(capacity_elems);
  ref::fill_random(host.data(), capacity_elems, dt, input_seed(rank, 0));
  for (int s = 0; s < num_sets; ++s) {
    std::string why = alloc_filled(host, stream, &b->input.emplace_back());
    if (!why.empty()) return why;
  }
  if (with_residual) {
    ref::fill_random(host.data(), capacity_elems, dt, replicated_seed(0, 1));
    for (int s = 0; s < num_sets; ++s) {
      std::string why = alloc_filled(host, stream, &b->residual_in.emplace_back());
      if (!why.empty()) return why;
    }
  }
  for (void** out : {&b->allreduce_out, &b->residual_out, &b->norm_out}) {
    std::string why = alloc(bytes, out);
    if (!why.empty()) return why;
    cudaError_t err = cudaMemsetAsync(*out, 0, bytes, stream);
    if (err != cudaSuccess) return cuda_message(err, "cudaMemsetAsync");
  }
  std::string why = alloc_filled(gamma_values(hidden, dtype), stream, &b->gamma);
  if (!why.empty()) return why;
  cudaError_t err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? "" : cuda_message(err, "cudaStreamSynchronize");
}

std::string allocate_quant_buffers(int64_t quant_bytes, int64_t scale_bytes, cudaStream_t stream,
                                   RankBuffers* b) {
  for (auto [out, bytes] : {std::pair{&b->quant_out, quant_bytes}, {&b->scale_out, scale_bytes}}) {
    // At least 16 bytes: a zero-byte cudaMalloc returns NULL, which would read as "not passed".
    std::string why = alloc(std::max<int64_t>(bytes, 16), out);
    if (!why.empty()) return why;
    cudaError_t err = cudaMemsetAsync(*out, 0, std::max<int64_t>(bytes, 16), stream);
    if (err != cudaSuccess) return cuda_message(err, "cudaMemsetAsync");
  }
  static const float kScaleIn[2] = {kStaticScale, kGlobalScale};  // static: read after return
  std::string why = alloc(sizeof(kScaleIn), reinterpret_cast<void**>(&b->scale_in));
  if (!why.empty()) return why;
  cudaError_t err =
      cudaMemcpyAsync(b->scale_in, kScaleIn, sizeof(kScaleIn), cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? "" : cuda_message(err, "upload scale_in");
}

std::string move_input_to_comm_buffer(arfComm_t comm, int64_t capacity_elems, cudaStream_t stream,
                                      RankBuffers* b) {
  void* buffer = nullptr;
  size_t bytes = 0;
  if (arfCommGetInputBuffer(comm, &buffer, &bytes) != arfSuccess) {
    return std::string("arfCommGetInputBuffer: ") + arfGetLastErrorString();
  }
  const size_t need = static_cast<size_t>(capacity_elems) * 2;
  if (b->input.size() != 1 || bytes < need) {
    return "--input-buffer: the input buffer holds " + std::to_string(bytes) + " bytes, the sweep needs " +
           std::to_string(need) + " in one input set";
  }
  cudaError_t err = cudaMemcpyAsync(buffer, b->input[0], need, cudaMemcpyDeviceToDevice, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) return cuda_message(err, "copy into the input buffer");
  cudaFree(b->input[0]);
  b->input[0] = buffer;
  b->input_is_comm_buffer = true;
  return "";
}

void free_buffers(RankBuffers* b) {
  if (!b->input_is_comm_buffer) {
    for (void* p : b->input) cudaFree(p);
  }
  for (void* p : b->residual_in) cudaFree(p);
  for (void* p : {b->allreduce_out, b->residual_out, b->norm_out, b->gamma, b->quant_out,
                  b->scale_out, static_cast<void*>(b->scale_in)}) {
    cudaFree(p);
  }
  *b = RankBuffers{};
}

std::string upload(void* dst, const std::vector<uint16_t>& host, cudaStream_t stream) {
  cudaError_t err = cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? "" : cuda_message(err, "upload");
}

std::string download(const void* src, int64_t count, cudaStream_t stream,
                     std::vector<uint16_t>* host) {
  host->resize(count);
  cudaError_t err =
      cudaMemcpyAsync(host->data(), src, count * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? "" : cuda_message(err, "download");
}

std::string download_bytes(const void* src, int64_t bytes, cudaStream_t stream,
                           std::vector<uint8_t>* host) {
  host->resize(bytes);
  if (bytes == 0) return "";
  cudaError_t err = cudaMemcpyAsync(host->data(), src, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return err == cudaSuccess ? "" : cuda_message(err, "download");
}

}  // namespace arf::bench
