// The soak's self-test (self_test.h).
#include "self_test.h"

#include <algorithm>

namespace arf::stress {

Corruption corruption_of(uint64_t call, uint64_t every, uint32_t world) {
  Corruption c;
  if (every == 0 || world == 0 || call % every != every - 1) return c;
  c.injected = true;
  c.rank = static_cast<uint32_t>(call % world);
  c.output = static_cast<int>((call / every) % kCorruptOutputs);
  return c;
}

std::string SelfTestVerdict::text() const {
  std::string s = "self-test: " + std::to_string(caught) + " of " + std::to_string(injected) +
                  " corrupted calls caught, " + std::to_string(false_alarms) + " other calls flagged";
  if (first_missed != UINT64_MAX) s += ", first missed call " + std::to_string(first_missed);
  if (first_false_alarm != UINT64_MAX) s += ", first false alarm call " + std::to_string(first_false_alarm);
  return s + (ok() ? ": PASS" : ": FAIL");
}

SelfTestVerdict self_test_verdict(const std::vector<std::vector<TableEntry>>& tables,
                                  const std::vector<int>& ranks, uint64_t issued, uint64_t every,
                                  uint32_t world) {
  SelfTestVerdict v;
  for (uint64_t call = 0; call < issued; ++call) {
    const Corruption c = corruption_of(call, every, world);
    v.injected += c.injected;
    bool caught = false;
    for (size_t i = 0; i < tables.size() && i < ranks.size(); ++i) {
      if (call >= tables[i].size()) continue;
      const bool flagged = tables[i][call].wrong > 0;
      const bool corrupting_rank = c.injected && static_cast<uint32_t>(ranks[i]) == c.rank;
      if (corrupting_rank) {
        caught = flagged;
      } else if (flagged) {
        ++v.false_alarms;
        v.first_false_alarm = std::min(v.first_false_alarm, call);
      }
    }
    if (c.injected) {
      v.caught += caught;
      if (!caught) v.first_missed = std::min(v.first_missed, call);
    }
  }
  return v;
}

}  // namespace arf::stress
