// The co-resident test mode's switch (docs/protocol.md, "The co-resident test mode"): a testing
// knob read from the environment at communicator creation and agreed by every rank, so that plans
// stay identical. Not a build option: the release library runs it.
#pragma once

#include <string>

#include "base/status.h"
#include "transport/group.h"

namespace arf {

inline constexpr const char* kCoResidentTestEnv = "ARF_TEST_CO_RESIDENT";

// This rank's request from the variable's value: off when unset, empty or "0", on for "1";
// InvalidArgument for anything else (before the rank joins its group).
Result<bool> co_resident_test_requested(const char* env_value);

// Collective, after the group formed: every rank's request through Group::exchange. Every rank
// returns the same outcome: the common value, or InvalidArgument naming the lowest rank whose
// request differs from rank 0's (a mode only some ranks run would pair a gated call with an
// ungated one).
Result<bool> agree_co_resident_test(Group& group, int rank, bool mine, double timeout_seconds);

}  // namespace arf
