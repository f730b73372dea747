// The `ipc` transport: one process per rank. Each rank allocates its workspace with cuMem as an
// exportable POSIX file descriptor (transport/cumem.h) and its ErrorRecord in a memfd; the
// bootstrap (transport/ipc_bootstrap.h: abstract Unix socket keyed by the id, owning user only)
// exchanges facts and descriptors; every rank imports, maps and access-enables every peer's
// workspace and maps every peer's ErrorRecord read-only. Then a real write/read probe runs on every
// pair (transport/peer_probe.h) and all ranks agree: the group forms on every rank or on none.
//
// Agreement: every failure after the bootstrap formed is exchanged before anyone gives up, so all
// ranks return the same verdict (naming the rank that failed and why) instead of some timing out.
// Failures before or during the bootstrap itself are the bootstrap's (Timeout naming ranks that
// never joined, CommFailed naming a rank that exited).
//
// Lifetime: a rank leaving closes its bootstrap connections, unmaps its imports and releases its
// own allocation at once; memory a peer still maps stays alive until that peer releases it (cuMem
// reference counting), so leaving never waits for other ranks and a slow peer never touches freed
// memory.
#pragma once

#include <memory>

#include "arfusion/arfusion.h"
#include "base/status.h"
#include "transport/group.h"
#include "transport/workspace.h"

namespace arf::ipc {

struct JoinRequest {
  arfUniqueId id{};   // the ipc key is its first 16 bytes
  int rank = 0;
  int world = 1;
  double timeout_seconds = 60;  // bound of the bootstrap and of every exchange
  // This rank's facts (device, sm_count, capacity, rank 0's tuning table text); no workspace yet:
  // join allocates it (kShareable) with `layout`.
  RankInfo proto;
  WorkspaceLayout layout;
};

// Collective over the `world` processes passing the same id. On success the group owns this
// rank's workspace and every import. Sets the calling thread's current device to proto.device.
Result<std::shared_ptr<Group>> join(const JoinRequest& request);

}  // namespace arf::ipc
