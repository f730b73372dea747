// Communicator configuration (communicator.h): the caller's struct upgraded to the current version
// and validated, the init timeout, the workspace size, and the tuning table every rank plans with.
#include "core/communicator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "transport/workspace.h"

namespace arf {
namespace {

bool valid_timeout(double s) { return std::isfinite(s) && s >= 0.0; }

}  // namespace

Result<std::string> tuning_table_contribution(int rank, const char* env_value) {
  if (rank != 0 || env_value == nullptr || *env_value == '\0') return std::string();
  const std::string origin = std::string(kTuningTableEnv) + "=" + env_value + ": ";
  Result<std::string> text = read_tuning_table_file(env_value);
  if (!text.is_ok()) return Status(text.status().code(), origin + text.status().message());
  Result<TuningTable> table = parse_tuning_table(text.value());
  if (!table.is_ok()) return Status(table.status().code(), origin + table.status().message());
  return text;
}

Result<std::shared_ptr<const TuningTable>> agree_tuning_table(
    const std::vector<RankInfo>& infos) {
  if (infos.empty() || infos[0].tuning_table_json.empty()) {
    return std::shared_ptr<const TuningTable>();
  }
  Result<TuningTable> table = parse_tuning_table(infos[0].tuning_table_json);
  if (!table.is_ok()) return table.status();
  return std::shared_ptr<const TuningTable>(std::make_shared<const TuningTable>(table.take()));
}

double effective_init_timeout(const arfCommConfig_t& c) {
  return c.init_timeout_seconds > 0 ? c.init_timeout_seconds : kDefaultInitTimeoutSeconds;
}

arfCommConfig_t upgrade_config(const arfCommConfig_t* caller) {
  arfCommConfig_t c;
  std::memset(&c, 0, sizeof(c));
  const size_t n = caller->struct_size == kCommConfigV2Bytes   ? kCommConfigV2Bytes
                   : caller->struct_size == kCommConfigV3Bytes ? kCommConfigV3Bytes
                   : caller->struct_size == kCommConfigV5Bytes ? kCommConfigV5Bytes
                                                               : sizeof(c);
  std::memcpy(&c, caller, n);
  return c;
}

Result<int64_t> workspace_bytes(const arfCommConfig_t& c) {
  ARF_RETURN_IF_ERROR(validate_config(c));
  const int64_t oneshot = static_cast<int64_t>(
      c.oneshot_max_tokens == 0 ? c.max_tokens : std::min(c.oneshot_max_tokens, c.max_tokens));
  Result<WorkspaceLayout> layout =
      workspace_layout(c.world_size, c.dtype == arfFloat16 ? DType::kFp16 : DType::kBf16,
                       static_cast<int64_t>(c.max_tokens), static_cast<int64_t>(c.max_hidden),
                       oneshot);
  if (!layout.is_ok()) return layout.status();
  return layout.value().total_bytes;
}

Status validate_config(const arfCommConfig_t& c) {
  const bool v2_size = c.struct_size == kCommConfigV2Bytes;
  const bool v3_size = c.struct_size == kCommConfigV3Bytes;
  const bool v5_size = c.struct_size == kCommConfigV5Bytes;
  const bool size_ok = v2_size || v3_size || v5_size || c.struct_size == sizeof(arfCommConfig_t);
  // Version 3 added programmatic_launch, version 4 verify_calls, version 6 max_ctas; a version 1
  // or 2 struct has the version 2 layout; version 5 changed arfFusedArgs_t only, so a version 4 or
  // 5 config has the same layout.
  static_assert(ARF_API_VERSION == 6, "a new API version: say which config layout it has");
  const bool version_ok = v2_size   ? (c.version >= 1 && c.version <= 2)
                          : v3_size ? c.version == 3
                          : v5_size ? (c.version == 4 || c.version == 5)
                                    : c.version == 6;
  if (!size_ok || !version_ok) {
    return invalid_argument("config struct_size " + std::to_string(c.struct_size) + " / version " +
                            std::to_string(c.version) + " do not match this library (" +
                            std::to_string(sizeof(arfCommConfig_t)) + " / " +
                            std::to_string(ARF_API_VERSION) + ", " +
                            std::to_string(kCommConfigV5Bytes) + " / 4-5, " +
                            std::to_string(kCommConfigV3Bytes) + " / 3, or " +
                            std::to_string(kCommConfigV2Bytes) +
                            " / 1-2); use arfCommConfigInit");
  }
  if (c.max_ctas < 0) {
    return invalid_argument("max_ctas " + std::to_string(c.max_ctas) +
                            " must be >= 0 (0: no bound)");
  }
  if (c.programmatic_launch != 0 && c.programmatic_launch != 1) {
    return invalid_argument("programmatic_launch " + std::to_string(c.programmatic_launch) +
                            " must be 0 or 1");
  }
  if (c.verify_calls != 0 && c.verify_calls != 1) {
    return invalid_argument("verify_calls " + std::to_string(c.verify_calls) + " must be 0 or 1");
  }
  const int transport = raw_enum(c.transport);
  if (transport != arfTransportLocal && transport != arfTransportIpc) {
    return invalid_argument("config transport " + std::to_string(transport) +
                            " is not a valid arfTransport_t");
  }
  const int w = c.world_size;
  if (w != 1 && w != 2 && w != 4 && w != 8) {
    return invalid_argument("world_size " + std::to_string(w) + " is not 1, 2, 4 or 8");
  }
  if (c.rank < 0 || c.rank >= w) {
    return invalid_argument("rank " + std::to_string(c.rank) + " is outside [0, " +
                            std::to_string(w) + ")");
  }
  if (c.device < 0) return invalid_argument("device " + std::to_string(c.device) + " is negative");
  if (c.max_hidden < static_cast<size_t>(kElemsPerVec) ||
      c.max_hidden > static_cast<size_t>(kMaxHidden) || c.max_hidden % kElemsPerVec != 0) {
    return invalid_argument("max_hidden " + std::to_string(c.max_hidden) +
                            " must be a multiple of 8 in [8, " + std::to_string(kMaxHidden) + "]");
  }
  if (c.max_tokens < 1 || c.max_tokens > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("max_tokens " + std::to_string(c.max_tokens) +
                            " must be in [1, 2^31)");
  }
  if (raw_enum(c.dtype) != arfBFloat16 && raw_enum(c.dtype) != arfFloat16) {
    return invalid_argument("config dtype " + std::to_string(raw_enum(c.dtype)) +
                            " must be arfBFloat16 or arfFloat16");
  }
  if (!valid_timeout(c.timeout_seconds) || !valid_timeout(c.init_timeout_seconds)) {
    return invalid_argument("timeout_seconds " + std::to_string(c.timeout_seconds) +
                            " and init_timeout_seconds " + std::to_string(c.init_timeout_seconds) +
                            " must be finite and >= 0");
  }
  return Status::ok();
}

}  // namespace arf
