// Rank -> device resolution. Lives apart from the runner so the "no GPU" path fails here, first,
// with one clear message, before any communicator or thread exists.
#include "devices.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "ops.h"
#include "process_group.h"

namespace arf::bench {
namespace {

constexpr int kVirtualRanksOnOneGpu = 8;

std::vector<int> default_devices(const BenchArgs& args, int visible) {
  if (op_descriptor(args.op).one_rank) return {0};
  int ranks = args.num_ranks;
  if (ranks == 0) ranks = visible > 1 ? std::min(visible, ARF_MAX_RANKS) : kVirtualRanksOnOneGpu;
  std::vector<int> devices(ranks);
  // More ranks than GPUs: round-robin, so ranks beyond the GPU count become virtual ranks.
  for (int r = 0; r < ranks; ++r) devices[r] = r % visible;
  return devices;
}

std::string query_device(int ordinal, DeviceInfo* info) {
  cudaDeviceProp prop{};
  cudaError_t err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    return "cudaGetDeviceProperties(" + std::to_string(ordinal) + "): " + cudaGetErrorString(err);
  }
  info->ordinal = ordinal;
  info->name = prop.name;
  info->sm_count = prop.multiProcessorCount;
  info->l2_bytes = prop.l2CacheSize;
  return "";
}

}  // namespace

std::string resolve_layout(const BenchArgs& args, RankLayout* layout) {
  int visible = 0;
  cudaError_t err = cudaGetDeviceCount(&visible);
  if (err != cudaSuccess || visible == 0) {
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") +
           (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") +
           "); arfusion-bench needs an NVIDIA GPU";
  }
  layout->devices = args.devices.empty() ? default_devices(args, visible) : args.devices;
  const int world = static_cast<int>(layout->devices.size());
  if (world > ARF_MAX_RANKS) return "at most " + std::to_string(ARF_MAX_RANKS) + " ranks";
  if (op_descriptor(args.op).one_rank && world != 1) {
    return "--op epilogue measures the world-1 epilogue; give one device (--devices 0)";
  }
  std::map<int, int> ranks_on;
  layout->info.resize(world);
  for (int r = 0; r < world; ++r) {
    const int dev = layout->devices[r];
    if (dev < 0 || dev >= visible) {
      return "device " + std::to_string(dev) + " out of range (" + std::to_string(visible) +
             " visible)";
    }
    std::string why = query_device(dev, &layout->info[r]);
    if (!why.empty()) return why;
    layout->max_ranks_per_device = std::max(layout->max_ranks_per_device, ++ranks_on[dev]);
  }
  layout->virtual_ranks = layout->max_ranks_per_device > 1;
  return "";
}

namespace {

// One rank's device as it travels between the processes (trivially copyable bytes).
struct WireDevice {
  char uuid[16];
  char name[96];
  int32_t ordinal;
  int32_t sm_count;
  int32_t l2_bytes;
  int32_t ok;
};

}  // namespace

std::string resolve_process_layout(const BenchArgs& args, ProcessGroup& group, RankLayout* layout) {
  WireDevice mine{};
  std::string why;
  if (!args.devices.empty() || args.num_ranks != 0) {
    why = "under arfusion-run the launcher places the ranks: drop --nranks/--devices";
  } else if (op_descriptor(args.op).one_rank) {
    why = "--op epilogue measures one rank: run it without arfusion-run";
  } else {
    DeviceInfo info;
    why = query_device(group.device(), &info);
    cudaDeviceProp prop{};
    if (why.empty() && cudaGetDeviceProperties(&prop, group.device()) == cudaSuccess) {
      std::memcpy(mine.uuid, prop.uuid.bytes, sizeof(mine.uuid));
      std::strncpy(mine.name, info.name.c_str(), sizeof(mine.name) - 1);
      mine.ordinal = info.ordinal;
      mine.sm_count = info.sm_count;
      mine.l2_bytes = info.l2_bytes;
      mine.ok = 1;
    }
  }
  const std::vector<std::string> all = group.all_gather(
      why.empty() ? "+" + std::string(reinterpret_cast<const char*>(&mine), sizeof(mine))
                  : "!" + why);
  if (!group.error().empty()) return group.error();
  const int world = group.world();
  layout->devices.assign(world, 0);
  layout->info.assign(world, DeviceInfo{});
  std::vector<std::string> uuids;  // physical GPUs in first-seen order
  std::map<int, int> ranks_on;
  for (int r = 0; r < world; ++r) {
    if (all[r].size() != 1 + sizeof(WireDevice) || all[r][0] != '+') {
      return "rank " + std::to_string(r) + ": " + (all[r].empty() ? "no device" : all[r].substr(1));
    }
    WireDevice d;
    std::memcpy(&d, all[r].data() + 1, sizeof(d));
    const std::string uuid(d.uuid, sizeof(d.uuid));
    const auto at = std::find(uuids.begin(), uuids.end(), uuid);
    layout->devices[r] = static_cast<int>(at - uuids.begin());
    if (at == uuids.end()) uuids.push_back(uuid);
    layout->info[r] = DeviceInfo{d.ordinal, d.name, d.sm_count, d.l2_bytes};
    layout->max_ranks_per_device =
        std::max(layout->max_ranks_per_device, ++ranks_on[layout->devices[r]]);
  }
  layout->virtual_ranks = layout->max_ranks_per_device > 1;
  return "";
}

}  // namespace arf::bench
