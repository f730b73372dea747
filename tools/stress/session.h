// One run of the soak in this process: every local rank's buffers and foreign kernels set
// up once, then per repeat fresh communicators, the rank threads, the monitor, the drain, the
// verdicts and the cross-rank comparison.
//
// Setup order (arfusion.h, "Ranks sharing one GPU"): every allocation, the foreign kernels'
// attributes and a warm-up launch of each (module load) happen before the first collective; the
// communicators (which allocate and synchronize too) are created before any rank thread starts;
// after the threads joined (each drained its own stream) the tables are copied back and the
// communicators destroyed. Nothing device-synchronizing runs while a collective may be in flight.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "buffers.h"
#include "kernels.h"
#include "options.h"
#include "report.h"
#include "schedule.h"

namespace arf::stress {

// How a plan's reason starts in the co-resident test mode (docs/protocol.md).
inline constexpr const char* kCoResidentReasonPrefix = "co-resident test mode";

class Session {
 public:
  explicit Session(const StressOptions& o);
  ~Session();

  // "" on success, else why (exit 3).
  std::string setup(RunReport* report);
  // One repeat; appends its RepeatReport. "" on success, else a setup error (exit 3).
  std::string run_repeat(int repeat, RunReport* report);

 private:
  std::string create_comms(int repeat);
  void destroy_comms();
  std::string probe(RunReport* report);
  // --graphs: every window captured on every local rank (graphs.h); "" or why not.
  std::string capture();
  void release_graphs();
  // "" when the communicators are in the co-resident test mode exactly when --co-resident asked
  // for it (their plans' reasons say so), else why not.
  std::string check_mode() const;

  const StressOptions& o_;
  std::vector<int> ranks_;    // global rank of each local rank
  std::vector<int> devices_;  // device of each local rank
  std::vector<int> sm_counts_;
  std::vector<std::unique_ptr<RankBuffers>> buffers_;
  std::vector<arfComm_t> comms_;
  ForeignShape shape_;
  std::optional<BoundaryTable> boundaries_;
  std::vector<CallSpec> replay_;
  std::vector<std::vector<cudaGraphExec_t>> graphs_;  // per local rank, per window (this repeat)
};

}  // namespace arf::stress
