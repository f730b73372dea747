// Kernels of the ipc init probe (peer_probe.h).
#include "transport/peer_probe.h"

#include "base/cuda_check.h"

namespace arf {
namespace {

struct ProbeTargets {
  uint64_t* slot[kMaxRanks];
};

// One thread per destination rank. Volatile + system fence: the same path (and ordering) as the
// protocol's flag stores to peers.
__global__ void probe_write_kernel(ProbeTargets t, int rank, int world, uint64_t salt) {
  const int p = static_cast<int>(threadIdx.x);
  if (p < world) {
    *reinterpret_cast<volatile uint64_t*>(t.slot[p] + rank) = probe_value(salt, rank, p);
  }
  __threadfence_system();
}

__global__ void probe_read_kernel(ProbeTargets t, int rank, int world, uint64_t* out) {
  const int p = static_cast<int>(threadIdx.x);
  if (p < world) out[p] = *reinterpret_cast<volatile const uint64_t*>(t.slot[p] + rank);
}

ProbeTargets targets(void* const* peer_probe, int world) {
  ProbeTargets t{};
  for (int p = 0; p < world; ++p) t.slot[p] = static_cast<uint64_t*>(peer_probe[p]);
  return t;
}

// Runs `launch` on a private non-blocking stream and waits for it.
template <typename Launch>
Status on_private_stream(Launch&& launch) {
  cudaStream_t stream = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  launch(stream);
  Status s = cuda_status(cudaGetLastError(), "probe kernel launch", __FILE__, __LINE__);
  if (s.is_ok()) s = cuda_status(cudaStreamSynchronize(stream), "probe kernel", __FILE__, __LINE__);
  (void)cudaStreamDestroy(stream);
  return s;
}

}  // namespace

Status run_probe_writes(void* const* peer_probe, int rank, int world, uint64_t salt) {
  const ProbeTargets t = targets(peer_probe, world);
  return on_private_stream([&](cudaStream_t s) {
    probe_write_kernel<<<1, kMaxRanks, 0, s>>>(t, rank, world, salt);
  });
}

Status run_probe_reads(void* const* peer_probe, int rank, int world, uint64_t* readback) {
  const ProbeTargets t = targets(peer_probe, world);
  uint64_t* device_out = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaMalloc(&device_out, sizeof(uint64_t) * kMaxRanks));
  Status s = on_private_stream([&](cudaStream_t st) {
    probe_read_kernel<<<1, kMaxRanks, 0, st>>>(t, rank, world, device_out);
  });
  if (s.is_ok()) {
    s = cuda_status(cudaMemcpy(readback, device_out, sizeof(uint64_t) * world,
                               cudaMemcpyDeviceToHost), "probe readback", __FILE__, __LINE__);
  }
  (void)cudaFree(device_out);
  return s;
}

}  // namespace arf
