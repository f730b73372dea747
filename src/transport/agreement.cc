// check_same_settings (group.h): the settings beyond capacity that every rank must share.
#include <string>

#include "transport/group.h"

namespace arf {

Status check_same_settings(const std::vector<RankInfo>& infos) {
  if (infos.empty()) return Status::ok();
  const RankInfo& first = infos[0];
  for (size_t r = 1; r < infos.size(); ++r) {
    if (infos[r].max_ctas != first.max_ctas) {
      return invalid_argument("ranks disagree on max_ctas: rank 0 has " +
                              std::to_string(first.max_ctas) + ", rank " + std::to_string(r) +
                              " has " + std::to_string(infos[r].max_ctas) +
                              " (0: no bound); plans, hence grids, must be equal on every rank");
    }
    if (infos[r].counters_near_wrap != first.counters_near_wrap) {
      return invalid_argument(
          "ranks disagree on ARF_DEBUG_COUNTERS_NEAR_WRAP: rank 0 has " +
          std::to_string(first.counters_near_wrap) + ", rank " + std::to_string(r) + " has " +
          std::to_string(infos[r].counters_near_wrap) +
          " (0: unset); every rank's protocol counters must start at the same value");
    }
  }
  return Status::ok();
}

}  // namespace arf
