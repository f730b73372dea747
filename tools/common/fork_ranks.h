// Test helper: runs body(rank) in `world` forked child processes under arfusion-run's variables
// (ARF_RANK, ARF_WORLD_SIZE, ARF_RENDEZVOUS_ID = a fresh id), as the launcher would start them.
// Each child's exit status is body's return value (0: its checks held); a child killed by a signal,
// or still running at the deadline (then killed), reports 128. The forking and the bounded wait
// are the call kit's process harness (callkit/processes.h). Host only, no CUDA: the multi-process
// tools' host channel is tested with it on the CPU.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "callkit/processes.h"
#include "export/tool_api.h"

namespace arf::testing {

template <typename Body>
std::vector<int> fork_ranks(int world, Body body, double deadline_seconds = 300) {
  Result<ipc::UniqueId> id = ipc::UniqueId::generate();
  const std::string hex = id.is_ok() ? id.value().hex() : "";
  const std::vector<callkit::ChildOutcome> children = callkit::run_children(
      static_cast<size_t>(world),
      [&](size_t r, int /*report_fd*/) {
        setenv("ARF_RANK", std::to_string(r).c_str(), 1);
        setenv("ARF_WORLD_SIZE", std::to_string(world).c_str(), 1);
        setenv("ARF_RENDEZVOUS_ID", hex.c_str(), 1);
        return body(static_cast<int>(r));
      },
      deadline_seconds, nullptr);
  std::vector<int> codes;
  for (const callkit::ChildOutcome& c : children) codes.push_back(c.exited ? c.exit_code : 128);
  return codes;
}

}  // namespace arf::testing
