// The co-resident test mode's switch (co_resident_test.h).
#include "core/co_resident_test.h"

#include <cstring>
#include <vector>

namespace arf {

Result<bool> co_resident_test_requested(const char* env_value) {
  if (env_value == nullptr || *env_value == '\0' || std::strcmp(env_value, "0") == 0) return false;
  if (std::strcmp(env_value, "1") == 0) return true;
  return invalid_argument(std::string(kCoResidentTestEnv) + "=" + env_value +
                          ": the co-resident test mode is 1 (on) or 0 / unset (off)");
}

Result<bool> agree_co_resident_test(Group& group, int rank, bool mine, double timeout_seconds) {
  Result<std::vector<std::string>> all = group.exchange(rank, mine ? "1" : "0", timeout_seconds);
  if (!all.is_ok()) return all.status();
  const std::vector<std::string>& votes = all.value();
  for (size_t r = 1; r < votes.size(); ++r) {
    if (votes[r] == votes[0]) continue;
    return invalid_argument(std::string(kCoResidentTestEnv) + " differs between ranks: rank 0 has " +
                            (votes[0] == "1" ? "1" : "0") + ", rank " + std::to_string(r) + " has " +
                            (votes[r] == "1" ? "1" : "0") + "; set it alike in every rank's environment");
  }
  return !votes.empty() && votes[0] == "1";
}

}  // namespace arf
