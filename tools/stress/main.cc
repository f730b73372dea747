// arfusion-stress: the refill soak. It exists
// to catch the missing-barrier class of bug — a rank reusing a buffer a slow peer still reads — which
// unit tests with identical data per rank and per call never see. One host thread and one stream
// per rank (8 virtual ranks on GPU 0 by default) issue back-to-back calls of every algorithm and
// pattern with a new token count every call (both sides of every dispatch boundary), distinct data
// per rank and call from a device ring, a consumer overwriting the inputs right after each call,
// random host skew, optionally inside captured CUDA graphs; every output of every rank is checked
// against the CPU reference and across ranks on host threads while the GPU runs on.
//
// Setup order matters with virtual ranks: everything is allocated, uploaded, captured and warmed up
// before the first collective (resources.h says why).
// Exit: 0 clean, 1 wrong elements, 2 timeout/hang, 3 setup error, 77 no GPU (args.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "args.h"
#include "calls.h"
#include "churn/churn_main.h"
#include "cross_process.h"
#include "dataset.h"
#include "device.h"
#include "gpu_verifier.h"
#include "process_group.h"
#include "resources.h"
#include "schedule.h"
#include "soak.h"
#include "summary.h"
#include "verifier.h"

#ifndef ARF_STRESS_VARIANT
#define ARF_STRESS_VARIANT "release"
#endif

namespace arf::stress {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) {
  g_interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C kills
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

DType ref_dtype(arfDataType_t dtype) { return dtype == arfFloat16 ? DType::kFp16 : DType::kBf16; }

// arfPlan over every combination and token count, on the first held rank's buffers (arfPlan
// validates the pointers). Pure and rank-symmetric, so its answer is every rank's.
DispatchMap probe_dispatch(const StressArgs& args, Resources& res) {
  std::vector<Combo> combos;
  for (arfAlgorithm_t a : args.algos) {
    for (arfPattern_t p : args.patterns) combos.push_back({a, p});
  }
  const RankResources& r0 = res.held(0);
  cuda_check(cudaSetDevice(r0.device), "cudaSetDevice");
  return DispatchMap::probe(combos, args.max_tokens, [&](const Combo& combo, int64_t tokens) {
    CallSpec call;
    call.algorithm = combo.algorithm;
    call.pattern = combo.pattern;
    call.tokens = tokens;
    const arfFusedArgs_t a = call_args(call, r0.work[0], args.dtype, args.hidden);
    arfPlan_t plan;
    PlanPoint point;
    if (arfPlan(r0.comm, &a, &plan) != arfSuccess) return point;
    point = {true, plan.algorithm, plan.inner_allreduce, plan.num_kernels, plan.grid, plan.block};
    return point;
  });
}

// 16-bit words of the largest step: an eager call of max_tokens, or a whole captured window.
int64_t largest_step_words(const StressArgs& args, const Schedule& schedule) {
  int64_t words = 2 * args.max_tokens * args.hidden;
  for (const auto& window : schedule.graph_windows()) {
    StepSpec step;
    step.calls = window;
    int64_t total = 0;
    step_output_offsets(step, args.hidden, &total);
    words = std::max(words, total);
  }
  return words;
}

struct Setup {
  std::vector<DataSet> sets;
  std::unique_ptr<Resources> resources;
  DispatchMap map;
  ScheduleOptions schedule;
};

int64_t set_rows(const StressArgs& args) {
  return args.max_tokens + std::min<int64_t>(args.max_tokens, 64);  // room for row offsets
}

// Communicators, device buffers and the dispatch map (all --list-boundaries needs).
void prepare(const StressArgs& args, Setup* s) {
  ResourceOptions ro;
  ro.devices = args.devices;
  ro.process_rank = args.process_rank;
  ro.dtype = args.dtype;
  ro.hidden = args.hidden;
  ro.max_tokens = args.max_tokens;
  ro.oneshot_max_tokens = args.oneshot_max_tokens;
  ro.timeout_seconds = args.timeout_seconds;
  ro.num_sets = args.num_sets;
  ro.set_rows = set_rows(args);
  ro.work_slots = args.num_graphs > 0 ? args.window : 1;
  ro.ring_depth = args.ring_depth;
  ro.device_slots = args.verify_gpu;
  s->resources = std::make_unique<Resources>(ro);
  s->map = probe_dispatch(args, *s->resources);
  s->schedule.seed = args.seed;
  s->schedule.num_sets = args.num_sets;
  s->schedule.set_rows = ro.set_rows;
  s->schedule.num_graphs = args.num_graphs;
  s->schedule.window = args.window;
}

// Data and references on the host, inputs into the device rings.
void make_data(const StressArgs& args, Setup* s) {
  DataOptions d;
  d.dtype = ref_dtype(args.dtype);
  d.world = args.world();
  d.num_sets = args.num_sets;
  d.rows = set_rows(args);
  d.hidden = args.hidden;
  d.seed = args.seed;
  std::printf("# generating %d data sets and their reference (%.2f GB of host memory)\n",
              d.num_sets, static_cast<double>(data_set_host_bytes(d)) / 1e9);
  std::fflush(stdout);
  s->sets = make_data_sets(d);
  s->resources->upload(s->sets);
  release_inputs(&s->sets);
}

// Graphs, pinned slots and warm-up: the last steps before the first collective.
void finish_setup(const StressArgs& args, Setup* s) {
  const Schedule prototype(s->map, s->schedule);
  s->resources->allocate_host(largest_step_words(args, prototype));
  if (!prototype.graph_windows().empty()) capture_graphs(*s->resources, prototype.graph_windows());
  warm_up(*s->resources);
}

// Watches the soak from the main thread: time budget, Ctrl-C, verifier errors, progress, hang.
void monitor(const StressArgs& args, Soak& soak, StopControl& stop, StepVerifier& verifier,
             const std::atomic<int>& running, Clock::time_point start) {
  uint64_t last_steps = 0;
  Clock::time_point last_change = Clock::now(), last_print = Clock::now();
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_interrupted || (args.seconds > 0 && seconds_since(start) > args.seconds)) stop.request();
    if (const std::string e = verifier.error(); !e.empty()) soak.abort(e);
    if (const uint64_t steps = verifier.steps_verified(); steps != last_steps) {
      last_steps = steps;
      last_change = Clock::now();
    } else if (seconds_since(last_change) > args.hang_seconds) {
      std::printf("HANG: no step verified for %.0f s (bounded waits should have expired long "
                  "before)\n", args.hang_seconds);
      print_progress(verifier.totals(), seconds_since(start));
      std::fflush(stdout);
      std::_Exit(kExitTimeout);  // spinning kernels cannot be cancelled: leave now
    }
    if (args.progress_seconds > 0 && seconds_since(last_print) >= args.progress_seconds) {
      last_print = Clock::now();
      print_progress(verifier.totals(), seconds_since(start));
    }
  }
}

// Under arfusion-run every rank writes its own report: FILE.json -> FILE.rank<r>.json.
std::string json_path_of(const StressArgs& args) {
  if (!args.processes()) return args.json_path;
  const std::string tag = ".rank" + std::to_string(args.process_rank);
  const std::string& p = args.json_path;
  const bool dot_json = p.size() > 5 && p.compare(p.size() - 5, 5, ".json") == 0;
  return dot_json ? p.substr(0, p.size() - 5) + tag + ".json" : p + tag;
}

// Under arfusion-run: how long the processes' host channel waits for a peer (only at the start and
// for the final exchange of step hashes; a peer that exits is seen at once).
constexpr double kHostChannelSeconds = 900;

int run(const StressArgs& args) {
  const Clock::time_point setup_start = Clock::now();
  std::unique_ptr<ProcessGroup> group;
  if (args.processes()) {
    std::string why;
    group = ProcessGroup::from_env(kHostChannelSeconds, &why);
    if (group == nullptr) throw StressError("arfusion-run host channel: " + why);
  }
  Setup s;
  prepare(args, &s);
  if (args.list_boundaries) {
    print_boundaries(s.map);
    return kExitOk;
  }
  make_data(args, &s);
  finish_setup(args, &s);
  print_header(args, s.map, ARF_STRESS_VARIANT);
  RunFacts facts;
  facts.variant = ARF_STRESS_VARIANT;
  if (const char* commit = std::getenv("ARF_GIT_COMMIT")) facts.git_commit = commit;
  facts.setup_seconds = seconds_since(setup_start);
  facts.pinned_bytes = s.resources->pinned_bytes();
  facts.device_bytes = s.resources->device_bytes();
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  facts.verifier = args.verify_gpu ? "gpu" : "host";
  facts.verify_threads = args.verify_gpu ? 0
                         : args.verify_threads > 0 ? args.verify_threads
                         : args.processes()          ? std::max(2, hw / args.world() - 1)
                                                   : std::max(2, hw - args.world() - 1);

  StopControl stop(args.world());
  const std::function<void()> on_first_wrong = [&] { if (args.stop_on_wrong) stop.request(); };
  // Constructed before the first collective: both allocate (resources.h says why that matters).
  std::unique_ptr<StepVerifier> verifier;
  Verifier* host_verifier = nullptr;
  if (args.verify_gpu) {
    verifier = std::make_unique<GpuVerifier>(
        GpuVerifierConfig{s.resources.get(), &s.sets, ref_dtype(args.dtype), on_first_wrong});
  } else {
    auto host = std::make_unique<Verifier>(
        VerifierConfig{s.resources.get(), &s.sets, ref_dtype(args.dtype), facts.verify_threads,
                       on_first_wrong, /*record_step_hashes=*/args.processes()});
    host_verifier = host.get();
    verifier = std::move(host);
  }
  Soak soak({&args, &s.map, s.schedule, s.resources.get(), verifier.get(), &stop});
  std::signal(SIGINT, on_sigint);
  const Clock::time_point start = Clock::now();
  const std::vector<int> local = args.local_ranks();
  std::atomic<int> running{static_cast<int>(local.size())};
  std::vector<std::thread> ranks;
  for (int r : local) {
    ranks.emplace_back([&, r] {
      soak.run_rank(r);
      running.fetch_sub(1);
    });
  }
  monitor(args, soak, stop, *verifier, running, start);
  for (std::thread& t : ranks) t.join();
  facts.unverified_steps = verifier->close();
  facts.elapsed_seconds = seconds_since(start);
  facts.verify_wait_seconds = soak.verify_wait_seconds();
  facts.timeouts = soak.timeouts();
  facts.errors = soak.errors() + (verifier->error().empty() ? 0 : 1);
  facts.first_error = !soak.first_error().empty() ? soak.first_error() : verifier->error();
  if (group != nullptr && host_verifier != nullptr) {
    const CrossProcessResult x = compare_step_hashes(*group, host_verifier->step_hashes());
    facts.cross_process = x.error.empty();
    facts.cross_process_steps = x.steps_compared;
    facts.cross_process_mismatched_steps = x.mismatched_steps;
    facts.cross_process_first_step = x.first_step;
    facts.cross_process_first_rank = x.first_rank;
    if (!x.error.empty()) {
      ++facts.errors;
      if (facts.first_error.empty()) facts.first_error = "step-hash exchange: " + x.error;
    }
  }
  const Totals totals = verifier->totals();
  print_result(args, s.map, totals, facts);
  if (!args.json_path.empty() && !write_json(json_path_of(args), args, s.map, totals, facts)) {
    return kExitSetup;
  }
  return exit_code(args, totals, facts);
}

}  // namespace
}  // namespace arf::stress

int main(int argc, char** argv) {
  using namespace arf::stress;
  if (argc > 1 && argv[1] == std::string("churn")) return arf::churn::churn_main(argc - 1, argv + 1, ARF_STRESS_VARIANT);
  int exit_code_on_parse = 0;
  const std::optional<StressArgs> args = parse_args(argc, argv, &exit_code_on_parse);
  if (!args) return exit_code_on_parse;
  // Before the first CUDA call: virtual ranks' streams get their own hardware queues where the
  // device has enough (the library orders enqueues anyway; tests/gpu/gpu_main.cc says more).
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // nccl algorithm: no NVLink multicast
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible — arfusion-stress not run (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return kExitNoGpu;
  }
  for (int d : args->devices) {
    if (d >= count) {
      std::fprintf(stderr, "arfusion-stress: device %d does not exist (%d visible)\n", d, count);
      return kExitSetup;
    }
  }
  try {
    return run(*args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arfusion-stress: %s\n", e.what());
    return kExitSetup;
  }
}
