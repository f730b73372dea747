// --corrupt-every N: the soak's self-test, proof that its checks can fail. On every Nth call one
// rank flips a bit of one output right after the library call (kernels.h, launch_corrupt), in the
// first row (first chunk) of the call, which that rank is the one to recompute under every
// --reference mode (call_args.h: rotate and split both give unit 0 of call c to rank c % world).
// The verdict: every corrupted call flagged (wrong > 0 in that rank's table entry) and no other
// call flagged on any rank. The outputs cycle per corrupted call through the call's own outputs:
// the all-reduce or residual_out, norm_out, quant_out, scale_out (a call without the one due gets
// the first). Host only; the device side reads the Corruption passed to it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "counters.h"

namespace arf::stress {

enum CorruptOutput : int { kCorruptPrimary = 0, kCorruptNorm, kCorruptQuant, kCorruptScale, kCorruptOutputs };

struct Corruption {
  bool injected = false;
  uint32_t rank = 0;
  int output = kCorruptPrimary;  // CorruptOutput, before the call's own outputs are considered
};

// Call `call` of a world of `world` ranks with --corrupt-every `every` (0: never).
Corruption corruption_of(uint64_t call, uint64_t every, uint32_t world);

struct SelfTestVerdict {
  uint64_t injected = 0, caught = 0, false_alarms = 0;
  uint64_t first_missed = UINT64_MAX, first_false_alarm = UINT64_MAX;
  bool ok() const { return injected > 0 && caught == injected && false_alarms == 0; }
  std::string text() const;
};

// tables[i] is rank ranks[i]'s table (one entry per call, no folding: calls < table size);
// calls [0, issued) count.
SelfTestVerdict self_test_verdict(const std::vector<std::vector<TableEntry>>& tables,
                                  const std::vector<int>& ranks, uint64_t issued, uint64_t every,
                                  uint32_t world);

}  // namespace arf::stress
