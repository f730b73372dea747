// A rank's place in an ipc job, as a launcher (tools/run: arfusion-run) hands it over in the
// environment. Parsed strictly: a typo must not silently become rank 0.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"

namespace arf {

inline constexpr const char* kEnvRank = "ARF_RANK";
inline constexpr const char* kEnvWorldSize = "ARF_WORLD_SIZE";
inline constexpr const char* kEnvDevice = "ARF_DEVICE";              // optional, default 0
inline constexpr const char* kEnvRendezvousId = "ARF_RENDEZVOUS_ID";  // 32 hex digits

struct EnvPlacement {
  int rank = 0;
  int world_size = 1;
  int device = 0;
  std::string rendezvous_id;
};

// Reads the variables through `lookup` (getenv by default; tests pass a map). InvalidArgument
// naming the variable when a required one is missing or any is not a plain non-negative decimal
// integer in range. The id's format is checked by its parser (arfUniqueIdFromString), not here.
using EnvLookup = std::function<const char*(const char*)>;
Result<EnvPlacement> placement_from_env(const EnvLookup& lookup = {});

}  // namespace arf
