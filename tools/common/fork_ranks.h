// Test helper: runs body(rank) in `world` forked child processes under arfusion-run's variables
// (ARF_RANK, ARF_WORLD_SIZE, ARF_RENDEZVOUS_ID = a fresh id), as the launcher would start them.
// Each child's exit status is body's return value (0: its checks held); a child killed by a signal
// reports 128. Host only, no CUDA: the multi-process tools' host channel is tested with it on the
// CPU.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "export/tool_api.h"

namespace arf::testing {

template <typename Body>
std::vector<int> fork_ranks(int world, Body body) {
  Result<ipc::UniqueId> id = ipc::UniqueId::generate();
  const std::string hex = id.is_ok() ? id.value().hex() : "";
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("ARF_RANK", std::to_string(r).c_str(), 1);
      setenv("ARF_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("ARF_RENDEZVOUS_ID", hex.c_str(), 1);
      _exit(body(r));
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  }
  return codes;
}

}  // namespace arf::testing
