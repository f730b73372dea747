// Everything a measurement needs per rank: communicator, stream, buffers, and the rank threads.
// Owned by the runner; the timing and check helpers borrow it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "args.h"
#include "buffers.h"
#include "callkit/call_spec.h"
#include "devices.h"
#include "rank_pool.h"

namespace arf::bench {

struct BenchContext {
  const BenchArgs* args = nullptr;
  RankLayout layout;
  RankPool* pool = nullptr;
  std::vector<arfComm_t> comms;       // comms[rank]
  std::vector<cudaStream_t> streams;  // streams[rank], non-blocking
  std::vector<RankBuffers> buffers;   // buffers[rank]

  int world() const { return static_cast<int>(comms.size()); }
  // A rank this process drives (0 in one process; its own rank under arfusion-run): the one whose
  // communicator plans and whose buffers describe the run.
  int local_rank() const { return pool->first_local(); }
};

// One collective call as every rank issues it (the call kit's spec: the bench sets pattern,
// algorithm, shape and, for --op quant, the scale storage, fallback level and whether norm_out is
// passed); the rank's buffers supply the pointers.
using CallSpec = callkit::CallSpec;

// The arguments of `spec` for this rank, reading input set `set` (rotation, see buffers.h).
arfFusedArgs_t make_fused_args(const CallSpec& spec, const RankBuffers& buffers, int set);

// Enqueues call number `call` of `spec` on this rank's stream, reading input set call % sets.
// Returns "" or the library's error. Graph-capture safe (the library's contract).
std::string enqueue_call(const BenchContext& ctx, const CallSpec& spec, int rank, int call);

// After the rank's stream has drained: the communicator's device-side error (a bounded wait that
// expired), or "".
std::string comm_health(const BenchContext& ctx, int rank);

// From the main thread while the rank threads are idle: the first rank whose communicator has
// failed, with why, or "". A failed communicator refuses all later work, so the sweep stops there.
std::string first_failed_comm(const BenchContext& ctx);

}  // namespace arf::bench
