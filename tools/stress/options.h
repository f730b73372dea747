// Command line of arfusion-stress (--help lists every flag). Parsing touches no CUDA, so
// it is unit-tested on machines without a GPU; the environment is read through a lookup function
// so tests can play the arfusion-run launcher.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "call_spec.h"
#include "schedule.h"
#include "steps.h"

namespace arf::stress {

// Exit codes, as arfusion-stress's: every outcome has its own, so a negative control can tell a
// detection from a hang or a crash.
enum StressExit : int {
  kStressOk = 0,        // clean (--expect-failure: a failure was detected)
  kStressWrong = 1,     // wrong elements or a cross-rank mismatch (--expect-failure: run was clean)
  kStressTimeout = 2,   // a bounded wait expired, an async error, or the watchdog fired
  kStressSetup = 3,     // bad arguments, CUDA/arfusion error outside the soak's checks, refused call
  kStressNoGpu = 77,    // no CUDA device: ctest SKIP_RETURN_CODE
};

// Threads per CTA of the soak's kernels on the side stream of --co-resident (no dynamic shared
// memory): the small footprint, since the mode is about protocol races, not SM starvation.
inline constexpr int kCoResidentSideBlock = 256;

inline const std::vector<int64_t> kDefaultHiddens = {128,  1024, 2048,  4096, 5120,
                                                     7168, 8192, 12288, 16384};

struct StressOptions {
  // World. In one process: devices[r] is rank r's device (repeats: virtual ranks).
  std::vector<int> devices;
  arfDataType_t dtype = arfBFloat16;
  int64_t max_tokens = 2048;
  int64_t max_hidden = 16384;  // the default hiddens run to 16384 (1024-thread blocks)
  int64_t oneshot_max_tokens = 0;
  std::vector<int64_t> hiddens;  // ascending, <= max_hidden (from --hiddens or the default list)
  std::vector<Pat> patterns;
  std::vector<arfAlgorithm_t> algos;
  std::vector<uint32_t> algo_weights;  // parallel to algos: algos[i] drawn with weight algo_weights[i]

  // Budget: whichever ends first. calls counts issued calls (skipped ones do not count).
  uint64_t calls = 0;
  double seconds = 0;
  uint64_t calls_per_algorithm = 0;  // stop once every listed algorithm issued this many
  uint64_t seed = 1;
  TokenMix mix = TokenMix::kEngine;  // how token counts are drawn (schedule.h)
  // Sandwich calls (post_gamma, API v6): the share of norm-pattern calls that get post_gamma
  // (schedule.h). Off by default; refused unless ARF_EXPERIMENTAL_SANDWICH=1 is set, the variable
  // without which the library refuses every such call (arfUnsupported).
  double sandwich_share = 0.0;

  // CUDA graphs (steps.h): windows captured per rank and replayed with new data, mixed with eager
  // calls (0: every call eager).
  int graphs = 0;
  int window = 4;

  // Timing and co-scheduling.
  int skew_us = 50;        // device-side delay per (call, rank) in the generate kernel
  int host_skew_us = 0;    // host busy-wait before a quarter of the calls, up to this long
  int in_flight = 8;       // calls the host runs ahead of its stream
  int foreign_block = 1024;
  int foreign_smem_kb = 96;
  int foreign_grid = 0;    // CTAs of the generate/overwrite kernels (0: the device's SM count)
  int connections = 0;     // CUDA_DEVICE_MAX_CONNECTIONS to force (0: 32 unless already set)
  bool time_segments = false;  // time each piece of a call on the rank streams (segment_times.h)
  uint64_t corrupt_every = 0;  // self-test: corrupt an output of every Nth call (self_test.h)

  // The co-resident test mode (docs/protocol.md): the library without the shared-device gate and
  // the return wait (ARF_TEST_CO_RESIDENT=1, set by the soak), grids that co-reside, so a peer can
  // run a call ahead. The soak's kernels then run on a side stream per rank and touch a call's
  // outputs only once the host saw the call complete; nothing but the library's calls is on the
  // rank streams, one call at a time on them.
  bool co_resident = false;

  // Library settings.
  double timeout_seconds = 10;
  bool verify_calls = false;
  bool pdl = false;

  // Verification: who recomputes each call's expected outputs; the other ranks' outputs are
  // compared with them by hash (call_args.h reference_units).
  ReferenceMode reference = ReferenceMode::kRotate;

  // Zero-copy inputs: the share (percent) of (call, rank) pairs whose input is the communicator's
  // input buffer (call_args.h input_in_buffer); replays default to 0 (the CSV is the call).
  int input_buffer_percent = 33;

  // Monitoring and report.
  double hang_seconds = 120;
  double progress_seconds = 10;
  int poll_every = 4;
  std::string json_path;
  bool expect_failure = false;
  bool list_boundaries = false;
  std::string write_schedule;  // CSV of the issued calls (replayable)

  // Replay.
  std::string replay_path;
  int repeat = 1;

  // Cross-rank table and exchange.
  uint64_t table_calls = 0;  // slots of the per-call table (0: the call budget, else 2^20)
  std::string hash_dir;      // under arfusion-run: where the per-rank hash files go

  // Under arfusion-run (ARF_RENDEZVOUS_ID set): this process is rank process_rank of
  // process_world; transport ipc; the communicator's placement comes from arfCommConfigFromEnv.
  int process_rank = -1;
  int process_world = 0;
  std::string rendezvous_id;

  std::string command_line;
  std::string library_variant = "release";  // set by the binary (main.cc): which library it links

  bool processes() const { return process_rank >= 0; }
  int world() const { return processes() ? process_world : static_cast<int>(devices.size()); }
  bool replay() const { return !replay_path.empty(); }
};

using EnvLookup = std::function<const char*(const char*)>;

// Whether the environment offers sandwich calls: ARF_EXPERIMENTAL_SANDWICH is exactly "1", the
// library's own test (any other value and the library refuses them).
bool sandwich_enabled(const EnvLookup& env);
// Why a run with sandwich calls cannot start here ("" when it can); `what` names the option or
// file that asks for them.
std::string sandwich_refusal(const std::string& what, const EnvLookup& env);

// nullopt with *exit_code set on --help or an error (the message already printed).
std::optional<StressOptions> parse_stress_options(int argc, char** argv, int* exit_code,
                                                const EnvLookup& env);

// Comma-separated lists, exposed for tests.
// The call generator's options of a run (the same on every rank: its schedule is the seed's).
ScheduleOptions schedule_options(const StressOptions& o);
StepOptions step_options(const StressOptions& o);

std::vector<Pat> parse_pattern_list(const std::string& list);          // throws std::invalid_argument
// "name[:weight],...": weight a positive integer, 1 when left out; a name listed twice is one
// entry (an error if the weights differ).
struct AlgorithmDraw {
  std::vector<arfAlgorithm_t> algos;
  std::vector<uint32_t> weights;  // parallel to algos
};
AlgorithmDraw parse_algorithm_list(const std::string& list);
std::vector<int64_t> parse_int_list(const std::string& list);

}  // namespace arf::stress
