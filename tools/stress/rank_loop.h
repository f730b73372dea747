// One rank's host thread: draws the schedule's steps (steps.h), and per step enqueues on its own
// stream
//   generate -> arfFusedAllReduce / arfAllReduce -> overwrite -> check -> event
// (a graph replay: generate for each of the window's calls -> the graph, which holds the calls and
// their overwrites -> check for each call -> event)
// (--co-resident: generate, overwrite and check on the rank's side stream, the call alone on the
// rank stream after generate's event, overwrite and check once the host saw the call complete)
// running up to --in-flight calls ahead of its stream (cudaEventSynchronize on its OWN event of
// call k - D; never a device-wide synchronization, no gate shared with other ranks). It polls
// arfCommGetAsyncError every --poll-every calls; on an error it stops issuing, records the message
// and arfCommGetFirstLostCall, and asks every rank to stop (StopControl).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "buffers.h"
#include "kernels.h"
#include "launch_order.h"
#include "options.h"
#include "schedule.h"
#include "stats.h"
#include "stop_control.h"

namespace arf::stress {

struct RankJob {
  int rank = 0;
  int world = 1;
  arfComm_t comm = nullptr;
  RankBuffers* buffers = nullptr;
  const StressOptions* options = nullptr;
  const BoundaryTable* boundaries = nullptr;
  const std::vector<CallSpec>* replay = nullptr;  // nullptr: the generated schedule
  StopControl* stop = nullptr;
  ForeignShape shape;
  int sm_count = 1;
  std::ofstream* schedule_out = nullptr;  // --write-schedule (one rank only)
  // --graphs: this rank's graph of each window (graphs.h), and the enqueue order of graph launches
  // between device mates in this process (launch_order.h; null: no mates to order), in which this
  // rank is `local`.
  const std::vector<cudaGraphExec_t>* graphs = nullptr;
  LaunchOrder* order = nullptr;
  int local = 0;
};

enum class Failure { kNone = 0, kAsync, kRefused, kCuda, kSchedule };

struct RankOutcome {
  IssueStats stats;
  uint64_t input_in_buffer = 0;  // calls whose input was the communicator's input buffer (per rank)
  uint64_t issued = 0;
  uint64_t graph_replays = 0;    // steps that replayed a captured window (--graphs)
  Failure failure = Failure::kNone;
  arfStatus_t status = arfSuccess;
  std::string message;
  uint64_t first_lost = UINT64_MAX;  // arfCommGetFirstLostCall, re-read after the drain
  SegmentTable segments;             // --time-segments: this rank's stream time per piece
};

// The oracle of a communicator: arfPlanShape (pure, rank-symmetric).
PlanOracle comm_oracle(arfComm_t comm, arfDataType_t dtype);

void run_rank(const RankJob& job, RankOutcome* out);

// After every rank's stream drained: the final error status and first lost call of a rank.
void final_error_state(arfComm_t comm, RankOutcome* out);

}  // namespace arf::stress
