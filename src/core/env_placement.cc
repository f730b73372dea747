#include "core/env_placement.h"

#include <cstdlib>
#include <limits>

namespace arf {
namespace {

// A decimal integer in [0, INT32_MAX], nothing else (no sign, no spaces, no suffix).
Result<int> parse_count(const char* name, const char* text) {
  if (text == nullptr || *text == '\0') {
    return invalid_argument(std::string(name) + " is not set (arfusion-run sets it for each rank)");
  }
  long long value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9' || value > std::numeric_limits<int>::max()) {
      return invalid_argument(std::string(name) + "=\"" + text +
                              "\" is not a non-negative decimal integer");
    }
    value = value * 10 + (*p - '0');
  }
  if (value > std::numeric_limits<int>::max()) {
    return invalid_argument(std::string(name) + "=\"" + text + "\" is out of range");
  }
  return static_cast<int>(value);
}

}  // namespace

Result<EnvPlacement> placement_from_env(const EnvLookup& lookup) {
  const EnvLookup get = lookup ? lookup : EnvLookup([](const char* n) { return std::getenv(n); });
  EnvPlacement p;
  Result<int> rank = parse_count(kEnvRank, get(kEnvRank));
  if (!rank.is_ok()) return rank.status();
  Result<int> world = parse_count(kEnvWorldSize, get(kEnvWorldSize));
  if (!world.is_ok()) return world.status();
  p.rank = rank.value();
  p.world_size = world.value();
  if (const char* device = get(kEnvDevice); device != nullptr) {
    Result<int> d = parse_count(kEnvDevice, device);
    if (!d.is_ok()) return d.status();
    p.device = d.value();
  }
  const char* id = get(kEnvRendezvousId);
  if (id == nullptr || *id == '\0') {
    return invalid_argument(std::string(kEnvRendezvousId) +
                            " is not set (arfusion-run sets it for each rank)");
  }
  p.rendezvous_id = id;
  return p;
}

}  // namespace arf
