// Which CUDA device each rank runs on, and the facts about those devices the report prints.
#pragma once

#include <string>
#include <vector>

#include "args.h"

namespace arf {
class ProcessGroup;  // tools/common/process_group.h
}  // namespace arf

namespace arf::bench {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int sm_count = 0;
  int l2_bytes = 0;
};

struct RankLayout {
  std::vector<int> devices;      // devices[rank]
  std::vector<DeviceInfo> info;  // info[rank]
  bool virtual_ranks = false;    // some device hosts more than one rank
  int max_ranks_per_device = 1;
};

// Fails (returns a message) when no CUDA device is usable, a device ordinal is out of range, or the
// op's world-size rule is broken (epilogue is world 1). Defaults: --op epilogue -> device 0 only;
// otherwise all visible GPUs, or 8 virtual ranks on device 0 when only one is visible.
std::string resolve_layout(const BenchArgs& args, RankLayout* layout);

// Process mode (arfusion-bench under arfusion-run): this process's rank runs on group.device();
// every process learns every rank's device through the group. devices[r] is then a job-wide index
// of the physical GPU (by UUID: processes may see different CUDA_VISIBLE_DEVICES orders), info[r]
// the device as rank r sees it. --nranks/--devices are refused (the launcher places the ranks), as
// is --op epilogue (one rank). Collective over the group.
std::string resolve_process_layout(const BenchArgs& args, ProcessGroup& group, RankLayout* layout);

}  // namespace arf::bench
