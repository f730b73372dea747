// Command line of arfusion-stress (flags documented in --help). Parsing touches no CUDA, so it is
// unit-tested on machines without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"

namespace arf::stress {

// Exit codes. A negative-control test must tell "corruption detected" from a hang or a crash, so
// every outcome has its own code (a crash is a signal, a ctest TIMEOUT kills a hang).
enum ExitCode : int {
  kExitOk = 0,             // every output verified, no wrong element, no timeout
                           // (--expect-corruption: corruption detected, no timeout)
  kExitWrong = 1,          // wrong elements found (--expect-corruption: NOT detected)
  kExitTimeout = 2,        // a bounded wait expired (arfTimeout) or the watchdog saw no progress
  kExitSetup = 3,          // bad arguments, CUDA or arfusion error outside the soak's checks
  kExitNoGpu = 77,         // no CUDA device visible: ctest SKIP_RETURN_CODE
};

struct StressArgs {
  std::vector<int> devices;  // devices[rank]; repeats = virtual ranks (processes: {own device})
  std::vector<arfAlgorithm_t> algos;
  std::vector<arfPattern_t> patterns;
  arfDataType_t dtype = arfBFloat16;
  int64_t hidden = 4096;
  int64_t max_tokens = 1024;
  int64_t oneshot_max_tokens = 0;  // 0: max_tokens
  uint64_t calls = 20000;          // call budget (0: until --seconds or Ctrl-C)
  double seconds = 0;              // time budget (0: none)
  uint64_t seed = 1;
  int num_sets = 8;                // data sets in the device ring
  int skew_us = 20;                // each rank sleeps up to this long before each step
  int num_graphs = 0;              // 0: eager; N: N captured windows, replayed in random order
  int window = 4;                  // calls per captured window
  int ring_depth = 6;              // steps in flight between the GPU and the verifier threads
  int verify_threads = 0;          // 0: hardware concurrency minus the rank threads, at least 2
  double timeout_seconds = 10;     // bound of every device wait (arfCommConfig_t)
  double hang_seconds = 120;       // watchdog: no step verified for this long -> exit 2
  double progress_seconds = 10;    // progress line period (0: none)
  bool expect_corruption = false;  // negative controls: succeed only if corruption is detected
  bool stop_on_wrong = false;      // stop at the first wrong call (implied by expect_corruption)
  bool list_boundaries = false;    // print the dispatch map and exit
  bool verify_gpu = false;         // --verify gpu: check kernels (gpu_verifier.h), not host threads
  uint64_t calls_per_algorithm = 0;  // > 0: calls = this x algorithms x patterns
  std::string json_path;
  std::string command_line;

  // Under arfusion-run (ARF_RENDEZVOUS_ID in the environment): this process is rank process_rank
  // of process_world, on devices[0], over the ipc transport (-1: every rank in this process).
  int process_rank = -1;
  int process_world = 0;

  bool processes() const { return process_rank >= 0; }
  int world() const { return processes() ? process_world : static_cast<int>(devices.size()); }
  // The ranks this process drives: all of them, or its own.
  std::vector<int> local_ranks() const;
};

// nullopt with *exit_code set on --help or a parse error (CLI11's message already printed).
std::optional<StressArgs> parse_args(int argc, char** argv, int* exit_code);

}  // namespace arf::stress
