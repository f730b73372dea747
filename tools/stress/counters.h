// Where the check kernel's verdicts go, per rank (plain structs shared by host and device code).
//
//  - TableEntry[table_calls] (device memory): per call slot, the wrapping sum of the call's output
//    terms (data_gen.h output_term; only calls whose outputs must match across ranks), its wrong
//    elements, and flags. Copied back after the run for the cross-rank comparison. Calls beyond
//    table_calls fold into slot call % table_calls (sums of sums: still equal across ranks).
//  - DeviceCounters (device memory): totals and the first bad element, updated with device-scope
//    atomics by every CTA of the check kernel.
//  - PinnedMirror (pinned, host-mapped): what the host reads WITHOUT synchronizing (progress,
//    watchdog, stop decisions). The last CTA of each check kernel copies the device counters into
//    it with plain stores, checks_done last, after a system fence. Why not atomics on the pinned
//    memory itself: system-scope atomics on host memory are not guaranteed over PCIe (they are
//    only where the device reports host-native atomics), so there is one writer per mirror.
#pragma once

#include <cstdint>

namespace arf::stress {

enum OutputId : uint32_t {
  kOutAllReduce = 0,   // allreduce_out (pattern allreduce, flat)
  kOutResidual = 1,    // residual_out
  kOutNorm = 2,        // norm_out
  kOutQuant = 3,       // quant_out code
  kOutScale = 4,       // scale_out value
  kOutScalePad = 5,    // scale_out padding (must be 0)
  kNumOutputs = 6,
};
const char* output_name(uint32_t id);

enum TableFlags : uint32_t {
  kSlotChecked = 1u,     // a check kernel ran for a call of this slot
  kSlotComparable = 2u,  // ... and its outputs must match across ranks (hash summed)
};

struct TableEntry {
  unsigned long long hash;
  unsigned int wrong;
  unsigned int flags;
};
static_assert(sizeof(TableEntry) == 16);

// The first wrong element of a rank, in stream order of its calls.
struct FirstBad {
  unsigned long long call;  // the call (issued index)
  unsigned int output;      // OutputId
  unsigned int got;         // bits as stored (16-bit values, codes, fp32 scales)
  unsigned int want;        // expected bits; for quant codes the fp32 bits of the scaled value
  unsigned int pad;
  long long row;
  long long col;            // column, or byte offset for scale_out
};

struct DeviceCounters {
  unsigned long long wrong_total;
  unsigned long long checks_done;  // check kernels completed on this rank
  unsigned int cta_done;           // CTAs finished in the current check kernel
  unsigned int first_claimed;      // 0 until the first wrong element claims `first`
  FirstBad first;
};

struct PinnedMirror {
  unsigned long long wrong_total;
  unsigned long long last_call;  // issued index of the last checked call
  unsigned int first_valid;
  unsigned int pad;
  FirstBad first;
  unsigned long long checks_done;  // written last
};

}  // namespace arf::stress
