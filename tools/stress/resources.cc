// Allocation and teardown of the soak's resources (resources.h).
#include "resources.h"

#include <map>

#include "device.h"

namespace arf::stress {
namespace {

void arf_check(arfStatus_t st, const std::string& what) {
  if (st != arfSuccess) {
    throw StressError(what + ": " + arfGetStatusString(st) + ": " + arfGetLastErrorString());
  }
}

int64_t elem_bytes(arfDataType_t dtype) { return dtype == arfFloat32 ? 4 : 2; }

}  // namespace

Resources::Resources(const ResourceOptions& options) : options_(options) {
  const int world = static_cast<int>(options.devices.size());
  ranks_.resize(static_cast<size_t>(world));
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  config.dtype = options.dtype;
  config.max_tokens = static_cast<size_t>(options.max_tokens);
  config.max_hidden = static_cast<size_t>(options.hidden);
  config.oneshot_max_tokens = static_cast<size_t>(options.oneshot_max_tokens);
  config.timeout_seconds = options.timeout_seconds;
  if (options.process_rank >= 0) {
    // One rank of an ipc job: transport, rank, world, device and id from arfusion-run.
    arf_check(arfCommConfigFromEnv(&config), "arfCommConfigFromEnv");
    ranks_[0].rank = options.process_rank;
    ranks_[0].device = options.devices[0];
    arf_check(arfCommInitRank(&ranks_[0].comm, &config), "arfCommInitRank");
  } else {
    std::vector<arfComm_t> comms(static_cast<size_t>(world), nullptr);
    arf_check(arfCommInitAll(comms.data(), world, options.devices.data(), &config),
              "arfCommInitAll");
    for (int r = 0; r < world; ++r) {
      ranks_[r].rank = r;
      ranks_[r].device = options.devices[r];
      ranks_[r].comm = comms[r];
    }
  }
  allocate_shared();
  for (RankResources& rr : ranks_) allocate_rank(rr);
}

void* Resources::device_alloc(int device, int64_t bytes) {
  void* ptr = nullptr;
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  cuda_check(cudaMalloc(&ptr, static_cast<size_t>(bytes)),
             "cudaMalloc(" + std::to_string(bytes) + " bytes) on device " + std::to_string(device));
  device_memory_.emplace_back(device, ptr);
  device_bytes_ += bytes;
  return ptr;
}

void Resources::allocate_shared() {
  // Replicated tensors (residual, gamma): one copy per device, read by every rank on it.
  std::map<int, SharedRings> per_device;
  const int64_t eb = elem_bytes(options_.dtype);
  const int64_t ring_bytes = options_.num_sets * options_.set_rows * options_.hidden * eb;
  for (RankResources& rr : ranks_) {
    auto [it, fresh] = per_device.try_emplace(rr.device);
    SharedRings& rings = it->second;
    if (fresh) {
      rings.residual = device_alloc(rr.device, ring_bytes);
      rings.gamma16 = device_alloc(rr.device, options_.num_sets * options_.hidden * eb);
      rings.gamma32 = device_alloc(rr.device, options_.num_sets * options_.hidden * 4);
    }
    rr.ring_residual = rings.residual;
    rr.ring_gamma16 = rings.gamma16;
    rr.ring_gamma32 = rings.gamma32;
  }
}

void Resources::allocate_rank(RankResources& rr) {
  cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");  // the stream belongs to the rank's device
  const int64_t eb = elem_bytes(options_.dtype);
  const int64_t call_bytes = options_.max_tokens * options_.hidden * eb;
  rr.ring_input = device_alloc(rr.device, options_.num_sets * options_.set_rows * options_.hidden * eb);
  for (int s = 0; s < options_.work_slots; ++s) {
    WorkSlot w;
    w.input = device_alloc(rr.device, call_bytes);
    w.residual = device_alloc(rr.device, call_bytes);
    w.gamma = device_alloc(rr.device, options_.hidden * 4);
    w.out_a = device_alloc(rr.device, call_bytes);
    w.out_b = device_alloc(rr.device, call_bytes);
    rr.work.push_back(w);
  }
  cuda_check(cudaStreamCreateWithFlags(&rr.stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

void Resources::allocate_host(int64_t slot_words) {
  const int64_t slot_bytes = slot_words * 2;
  for (RankResources& rr : ranks_) {
    cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");
    for (int s = 0; s < options_.ring_depth; ++s) {
      HostSlot h;
      if (options_.device_slots) {
        h.data = static_cast<uint16_t*>(device_alloc(rr.device, slot_bytes));  // freed with the rest
      } else {
        void* ptr = nullptr;
        cuda_check(cudaHostAlloc(&ptr, static_cast<size_t>(slot_bytes), cudaHostAllocPortable),
                   "cudaHostAlloc(" + std::to_string(slot_bytes) + " bytes)");
        h.data = static_cast<uint16_t*>(ptr);
        pinned_bytes_ += slot_bytes;
      }
      // Blocking sync: verifier threads sleep in cudaEventSynchronize instead of spinning on
      // cores the rank threads need.
      cuda_check(cudaEventCreateWithFlags(&h.ready, cudaEventDisableTiming | cudaEventBlockingSync),
                 "cudaEventCreate");
      rr.host.push_back(h);
    }
  }
}

void Resources::upload(const std::vector<DataSet>& sets) {
  const int64_t eb = elem_bytes(options_.dtype);
  const int64_t set_bytes = options_.set_rows * options_.hidden * eb;
  std::map<int, bool> shared_done;
  for (RankResources& rr : ranks_) {
    cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");
    char* input = static_cast<char*>(rr.ring_input);
    const bool do_shared = !shared_done[rr.device];
    shared_done[rr.device] = true;
    for (size_t s = 0; s < sets.size(); ++s) {
      cuda_check(cudaMemcpy(input + s * set_bytes, sets[s].inputs[rr.rank].data(), set_bytes,
                            cudaMemcpyHostToDevice), "upload input ring");
      if (!do_shared) continue;
      char* residual = const_cast<char*>(static_cast<const char*>(rr.ring_residual));
      char* g16 = const_cast<char*>(static_cast<const char*>(rr.ring_gamma16));
      char* g32 = const_cast<char*>(static_cast<const char*>(rr.ring_gamma32));
      cuda_check(cudaMemcpy(residual + s * set_bytes, sets[s].residual.data(), set_bytes,
                            cudaMemcpyHostToDevice), "upload residual ring");
      cuda_check(cudaMemcpy(g16 + s * options_.hidden * eb, sets[s].gamma16.data(),
                            options_.hidden * eb, cudaMemcpyHostToDevice), "upload gamma ring");
      cuda_check(cudaMemcpy(g32 + s * options_.hidden * 4, sets[s].gamma32.data(),
                            options_.hidden * 4, cudaMemcpyHostToDevice), "upload gamma32 ring");
    }
  }
}

Resources::~Resources() {
  for (RankResources& rr : ranks_) {
    cudaSetDevice(rr.device);
    for (cudaGraphExec_t g : rr.graphs) cudaGraphExecDestroy(g);
  }
  // Collective; one thread may destroy every rank in turn (arfusion.h). Each waits for its own
  // device work first, which the bounded waits keep finite even after a failure.
  for (RankResources& rr : ranks_) (void)arfCommDestroy(rr.comm);
  for (RankResources& rr : ranks_) {
    cudaSetDevice(rr.device);
    for (HostSlot& h : rr.host) {
      cudaEventDestroy(h.ready);
      if (!options_.device_slots) cudaFreeHost(h.data);
    }
    if (rr.stream != nullptr) cudaStreamDestroy(rr.stream);
  }
  for (auto& [device, ptr] : device_memory_) {
    cudaSetDevice(device);
    cudaFree(ptr);
  }
}

}  // namespace arf::stress
