// One rank of a multi-process run of arfusion-bench started by
// arfusion-run (one process per rank, the ipc transport, as engines run). The rank processes need a
// host channel of their own for what an in-process run shares through memory: barriers before
// timed regions, agreement after a failure, per-rank results (times, check counts, output hashes).
// It is an ipc::Bootstrap keyed by an id DERIVED from the job's ARF_RENDEZVOUS_ID (the
// communicator's own bootstrap listens under the id itself, so the two never meet).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "export/tool_api.h"

namespace arf {

class ProcessGroup {
 public:
  // Under arfusion-run (ARF_RENDEZVOUS_ID set): joins the group of ARF_WORLD_SIZE processes,
  // bounded by timeout_seconds per collective (a peer that exits is seen at once). Returns null
  // with *why empty when not under a launcher; null with *why set when the environment is
  // malformed or the group cannot form.
  static std::unique_ptr<ProcessGroup> from_env(double timeout_seconds, std::string* why);

  int rank() const { return bootstrap_.rank(); }
  int world() const { return bootstrap_.world(); }
  int device() const { return device_; }

  // Collective, like every method below: every rank calls it in the same order. All receive the
  // AND of the ballots; false too once the channel has failed (error() says why).
  bool vote(bool ok);
  void barrier();
  // Every rank's `mine`, indexed by rank (any lengths). On failure: `world` copies of "" and
  // error() set.
  std::vector<std::string> all_gather(const std::string& mine);
  // The first failure of the channel ("" while healthy). After one, every call fails at once.
  const std::string& error() const { return error_; }

 private:
  ProcessGroup(ipc::Bootstrap bootstrap, int device)
      : bootstrap_(std::move(bootstrap)), device_(device) {}
  void fail(const std::string& what, const Status& s);

  ipc::Bootstrap bootstrap_;
  int device_ = 0;
  std::string error_;
};

}  // namespace arf
