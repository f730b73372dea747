// CLI11 parsing and validation of arfusion-stress's command line (options.h).
#include "options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace arf::stress {
namespace {

// Every pattern and (options.h) every hidden up to 16384 by default: what the soak must cover is
// what an unqualified run covers.
constexpr const char* kDefaultPatterns =
    "allreduce,flat,residual_rmsnorm,fp8_tensor,fp8_token,fp8_group,nvfp4,mxfp4";
constexpr const char* kDefaultAlgos = "auto,oneshot_lamport,oneshot_pull,twoshot,unfused";
constexpr uint64_t kDefaultCalls = 10000;
constexpr uint64_t kDefaultTableCalls = uint64_t{1} << 20;

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool valid_world(int n) { return n == 1 || n == 2 || n == 4 || n == 8; }

// Under arfusion-run: rank and world from the launcher's variables (the communicator itself is
// configured by arfCommConfigFromEnv, which reads the same variables).
void apply_launcher(StressOptions& o, const EnvLookup& env, bool placement_given) {
  const char* id = env("ARF_RENDEZVOUS_ID");
  const char* rank = env("ARF_RANK");
  const char* world = env("ARF_WORLD_SIZE");
  if (rank == nullptr || world == nullptr) {
    throw CLI::ValidationError("arfusion-run environment",
                               "ARF_RENDEZVOUS_ID is set but ARF_RANK / ARF_WORLD_SIZE are not");
  }
  o.rendezvous_id = id;
  try {
    o.process_rank = std::stoi(rank);
    o.process_world = std::stoi(world);
  } catch (const std::exception&) {
    throw CLI::ValidationError("arfusion-run environment", "ARF_RANK / ARF_WORLD_SIZE not integers");
  }
  if (!valid_world(o.process_world) || o.process_rank < 0 || o.process_rank >= o.process_world) {
    throw CLI::ValidationError("arfusion-run environment", "world must be 1, 2, 4 or 8, rank < world");
  }
  const char* why = nullptr;
  if (placement_given) why = "--devices/--nranks: the launcher places the ranks";
  if (o.seconds > 0) why = "--seconds: processes must stop on the same call; give --calls";
  if (why != nullptr) throw CLI::ValidationError("under arfusion-run", why);
  o.devices.clear();
}

// --co-resident (options.h): the soak's kernels leave the rank streams, so the options that shape
// or time them there are refused rather than ignored; the environment variable the soak sets
// must not be set without the option (the soak would put its kernels on the rank streams).
void validate_co_resident(StressOptions& o, const std::vector<std::string>& rank_stream_options,
                          const EnvLookup& env) {
  const char* mode = env("ARF_TEST_CO_RESIDENT");
  const bool mode_set = mode != nullptr && *mode != '\0' && std::string(mode) != "0";
  if (!o.co_resident) {
    if (mode_set) {
      throw CLI::ValidationError("ARF_TEST_CO_RESIDENT",
                                 "is set: give --co-resident instead (the soak then keeps its own kernels "
                                 "off the rank streams, which the mode requires)");
    }
    return;
  }
  if (!rank_stream_options.empty()) {
    std::string given;
    for (const std::string& name : rank_stream_options) given += (given.empty() ? "" : ", ") + name;
    throw CLI::ValidationError("--co-resident",
                               "keeps the soak's kernels off the rank streams (the library's return wait is "
                               "off, so a kernel queued behind a call could block a mate's call in a shared "
                               "hardware queue), one call at a time on the rank stream, at a fixed small "
                               "footprint: " + given +
                               " cannot be combined with it");
  }
  // The host waits for each call before it reads the outputs (rank_loop.cc), so the rank stream
  // holds one call at a time; two ring slots let the host enqueue the next call while the side
  // stream still checks the last one.
  o.in_flight = 2;
  o.foreign_block = kCoResidentSideBlock;
  o.foreign_smem_kb = 0;
}

void validate(StressOptions& o, int nranks, bool placement_given, const std::string& hiddens,
              const EnvLookup& env) {
  if (env("ARF_RENDEZVOUS_ID") != nullptr) apply_launcher(o, env, placement_given);
  if (!o.processes()) {
    if (!o.devices.empty() && nranks > 0 && static_cast<int>(o.devices.size()) != nranks) {
      throw CLI::ValidationError("--nranks", "does not match the length of --devices");
    }
    if (o.devices.empty()) o.devices.assign(nranks > 0 ? nranks : 2, 0);
    if (!valid_world(static_cast<int>(o.devices.size()))) {
      throw CLI::ValidationError("--nranks/--devices", "1, 2, 4 or 8 ranks");
    }
    for (int d : o.devices) {
      if (d < 0) throw CLI::ValidationError("--devices", "ordinals are >= 0");
    }
  }
  if (o.max_hidden < 8 || o.max_hidden % 8 != 0 || o.max_hidden > 16384) {
    throw CLI::ValidationError("--max-hidden", "a multiple of 8 in [8, 16384]");
  }
  std::vector<int64_t> list = hiddens.empty() ? kDefaultHiddens : parse_int_list(hiddens);
  o.hiddens.clear();
  for (int64_t h : list) {
    if (h < 8 || h % 8 != 0 || h > 16384) {
      throw CLI::ValidationError("--hiddens", "every hidden a multiple of 8 in [8, 16384]");
    }
    if (h <= o.max_hidden) o.hiddens.push_back(h);
  }
  std::sort(o.hiddens.begin(), o.hiddens.end());
  o.hiddens.erase(std::unique(o.hiddens.begin(), o.hiddens.end()), o.hiddens.end());
  if (o.hiddens.empty()) throw CLI::ValidationError("--hiddens", "none is <= --max-hidden");
  if (!o.replay()) {
    for (Pat p : o.patterns) {
      const int64_t block = p == Pat::kFp8Group ? 128 : p == Pat::kNvfp4 ? 16 : p == Pat::kMxfp4 ? 32 : 8;
      if (std::none_of(o.hiddens.begin(), o.hiddens.end(), [&](int64_t h) { return h % block == 0; })) {
        throw CLI::ValidationError("--hiddens", std::string("no hidden fits pattern ") + pat_name(p));
      }
    }
  }
  if (o.foreign_block % 32 != 0) throw CLI::ValidationError("--foreign-block", "a multiple of 32");
  const bool budget = o.calls > 0 || o.seconds > 0 || o.calls_per_algorithm > 0;
  if (!budget && !o.replay()) o.calls = kDefaultCalls;
  if (o.processes() && !o.replay() && o.calls == 0 && o.calls_per_algorithm == 0) {
    throw CLI::ValidationError("under arfusion-run", "give --calls or --calls-per-algorithm");
  }
  if (o.graphs > 0) {
    // A window's calls are fixed at capture: no recorded sequence to follow, no per-call timing,
    // and a CSV row per call would not say which calls replayed a graph.
    const char* why = o.replay() ? "--replay" : !o.write_schedule.empty() ? "--write-schedule"
                      : o.time_segments ? "--time-segments" : nullptr;
    if (why != nullptr) throw CLI::ValidationError("--graphs", std::string("cannot be combined with ") + why);
  }
  // A graph step may issue up to window - 1 calls past the call budget (steps end on a step).
  const uint64_t overshoot = o.graphs > 0 ? static_cast<uint64_t>(o.window) : 0;
  if (o.table_calls == 0) o.table_calls = o.calls > 0 ? o.calls + overshoot : kDefaultTableCalls;
  if (o.corrupt_every > 0) {
    // The verdict reads every rank's table entry of every call: ranks in this process, no folding.
    if (o.processes()) throw CLI::ValidationError("--corrupt-every", "needs every rank in one process");
    if (o.expect_failure) throw CLI::ValidationError("--corrupt-every", "has its own verdict; not with --expect-failure");
    if (o.calls == 0 || o.calls + overshoot > o.table_calls) {
      throw CLI::ValidationError("--corrupt-every", "give --calls (at most --table-calls): every call needs its own table entry");
    }
  }
}

// --sandwich-share: only where the library offers the calls, only with a pattern that has a norm,
// and not with --replay (the CSV says which calls are sandwich calls: column post_gamma).
void validate_sandwich(const StressOptions& o, const EnvLookup& env) {
  if (!(o.sandwich_share > 0.0)) return;
  const std::string why = sandwich_refusal("--sandwich-share", env);
  if (!why.empty()) throw CLI::ValidationError("--sandwich-share", why);
  if (o.replay()) {
    throw CLI::ValidationError("--sandwich-share", "cannot be combined with --replay: the CSV's "
                               "post_gamma column says which calls are sandwich calls");
  }
  if (std::none_of(o.patterns.begin(), o.patterns.end(), pat_has_norm)) {
    throw CLI::ValidationError("--sandwich-share", "no pattern of --patterns has a norm (allreduce "
                               "and flat take no post_gamma)");
  }
}

std::string join_argv(int argc, char** argv) {
  std::ostringstream out;
  for (int i = 0; i < argc; ++i) out << (i ? " " : "") << argv[i];
  return out.str();
}

}  // namespace

bool sandwich_enabled(const EnvLookup& env) {
  const char* v = env("ARF_EXPERIMENTAL_SANDWICH");
  return v != nullptr && std::string(v) == "1";
}

std::string sandwich_refusal(const std::string& what, const EnvLookup& env) {
  if (sandwich_enabled(env)) return "";
  return what + " asks for sandwich calls (post_gamma, API v6), which the library refuses "
         "(arfUnsupported) until their GPU verification has passed, unless the process sets "
         "ARF_EXPERIMENTAL_SANDWICH=1: set ARF_EXPERIMENTAL_SANDWICH=1 in the environment (testing "
         "only; every rank alike), or leave sandwich calls out";
}

std::vector<Pat> parse_pattern_list(const std::string& list) {
  std::vector<Pat> out;
  for (const std::string& name : split(list)) {
    const std::optional<Pat> p = pat_from_name(name);
    if (!p) throw std::invalid_argument("unknown pattern '" + name + "'");
    if (std::find(out.begin(), out.end(), *p) == out.end()) out.push_back(*p);
  }
  if (out.empty()) throw std::invalid_argument("at least one pattern");
  return out;
}

AlgorithmDraw parse_algorithm_list(const std::string& list) {
  AlgorithmDraw out;
  for (const std::string& item : split(list)) {
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    uint32_t weight = 1;
    if (colon != std::string::npos) {
      const std::string w = item.substr(colon + 1);
      // Digits only and at most 4 of them, so std::stoul can neither throw nor wrap.
      const bool digits =
          !w.empty() && w.size() <= 4 && w.find_first_not_of("0123456789") == std::string::npos;
      weight = digits ? static_cast<uint32_t>(std::stoul(w)) : 0;
      if (weight == 0 || weight > 1000) {
        throw std::invalid_argument("algorithm weight in '" + item + "': an integer from 1 to 1000");
      }
    }
    arfAlgorithm_t a;
    if (arfAlgorithmFromName(name.c_str(), &a) != arfSuccess) {
      throw std::invalid_argument("unknown algorithm '" + name + "'");
    }
    const auto it = std::find(out.algos.begin(), out.algos.end(), a);
    if (it == out.algos.end()) {
      out.algos.push_back(a);
      out.weights.push_back(weight);
    } else if (out.weights[it - out.algos.begin()] != weight) {
      throw std::invalid_argument("algorithm '" + name + "' listed with two weights");
    }
  }
  if (out.algos.empty()) throw std::invalid_argument("at least one algorithm");
  return out;
}

std::vector<int64_t> parse_int_list(const std::string& list) {
  std::vector<int64_t> out;
  for (const std::string& item : split(list)) {
    size_t used = 0;
    const long long v = std::stoll(item, &used);
    if (used != item.size()) throw std::invalid_argument("not an integer: '" + item + "'");
    out.push_back(v);
  }
  return out;
}

std::optional<StressOptions> parse_stress_options(int argc, char** argv, int* exit_code,
                                                const EnvLookup& env) {
  StressOptions o;
  o.command_line = join_argv(argc, argv);
  CLI::App app{"arfusion-stress: the soak, written against the public API only (tools/stress/README.md)"};
  app.name("arfusion-stress");
  int nranks = 0;
  std::string patterns = kDefaultPatterns, algos = kDefaultAlgos, hiddens, dtype = "bf16";
  auto* devices = app.add_option("--devices", o.devices, "device of each rank (repeats: virtual ranks)")
                      ->delimiter(',');
  auto* nr = app.add_option("--nranks", nranks, "virtual ranks on device 0: 1, 2, 4 or 8 (default 2)");
  app.add_option("-d,--dtype", dtype, "bf16 | fp16")->check(CLI::IsMember({"bf16", "fp16"}))
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "communicator capacity in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--max-hidden", o.max_hidden, "communicator capacity in columns")->capture_default_str();
  app.add_option("--oneshot-max-tokens", o.oneshot_max_tokens, "Lamport capacity (0: max-tokens)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--hiddens", hiddens,
                 "hidden sizes drawn from (default 128,1024,2048,4096,5120,7168,8192,12288,16384; "
                 "capped by --max-hidden)");
  app.add_option("--patterns", patterns,
                 "allreduce,flat,residual_rmsnorm,fp8_tensor,fp8_token,fp8_group,nvfp4,mxfp4")
      ->capture_default_str();
  app.add_option("-a,--algos", algos,
                 "algorithms drawn from, per call; name:N weighs one N times (default 1)")
      ->capture_default_str();
  app.add_option("-n,--calls", o.calls, "issued-call budget (default 10000 without another budget)");
  app.add_option("--seconds", o.seconds, "time budget")->check(CLI::NonNegativeNumber);
  app.add_option("--calls-per-algorithm", o.calls_per_algorithm,
                 "stop once every listed algorithm issued this many calls");
  app.add_option("--seed", o.seed, "seed of the schedule and the data")->capture_default_str();
  std::string mix = "engine";
  app.add_option("--mix", mix,
                 "token counts: engine (15% full capacity; large after tiny at half to full "
                 "capacity) or volume (2% full capacity, the rest of those and most large calls at "
                 "full grid: fewer bytes per call, the same kinds of call)")
      ->check(CLI::IsMember({"engine", "volume"}))->capture_default_str();
  app.add_option("--sandwich-share", o.sandwich_share,
                 "share (0..1) of norm-pattern calls that are sandwich calls (post_gamma set, API v6; "
                 "default 0); needs ARF_EXPERIMENTAL_SANDWICH=1 in the environment")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--skew-us", o.skew_us, "device delay per (call, rank) before the inputs, 0..this")
      ->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--host-skew-us", o.host_skew_us, "host busy-wait before 1/4 of the calls, 0..this")
      ->check(CLI::Range(0, 1000000))->capture_default_str();
  auto* in_flight = app.add_option("--in-flight", o.in_flight, "steps (a call, or a graph replay) the host runs ahead of its own stream")
                       ->check(CLI::Range(1, 4096))->capture_default_str();
  auto* foreign_block = app.add_option("--foreign-block", o.foreign_block, "threads per CTA of our kernels")
                            ->check(CLI::Range(32, 1024))->capture_default_str();
  auto* foreign_smem = app.add_option("--foreign-smem-kb", o.foreign_smem_kb,
                                      "dynamic shared memory per CTA of our kernels")
                           ->check(CLI::Range(0, 227))->capture_default_str();
  auto* foreign_grid = app.add_option("--foreign-grid", o.foreign_grid, "CTAs of the generate/overwrite kernels (0: SMs)")
                           ->check(CLI::Range(0, 1 << 20));
  app.add_option("-G,--graphs", o.graphs,
                 "CUDA graphs: this many windows captured per rank, replayed with new data in about 3 "
                 "steps of 4 (the rest eager calls); 0: every call eager")
      ->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--window", o.window, "calls per captured window (--graphs)")
      ->check(CLI::Range(1, 16))->capture_default_str();
  app.add_flag("--co-resident", o.co_resident,
               "the co-resident test mode (docs/protocol.md): the library without the shared-device "
               "gate and the return wait, grids that co-reside, so a peer can run a call ahead; the "
               "soak's kernels on a side stream, one call at a time on the rank stream");
  app.add_option("--connections", o.connections, "force CUDA_DEVICE_MAX_CONNECTIONS (default: 32 "
                 "unless already set)")->check(CLI::Range(1, 32));
  app.add_option("--corrupt-every", o.corrupt_every,
                 "self-test: every Nth call one rank flips a bit of one output after the library "
                 "call; exit 0 only if every such call and no other was flagged (self_test.h)");
  auto* time_segments = app.add_flag("--time-segments", o.time_segments,
               "report where the rank streams spend their time (generate, call, overwrite, check "
               "per pattern; CUDA events with timing)");
  app.add_option("--timeout", o.timeout_seconds, "arfCommConfig_t.timeout_seconds")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--verify-calls", o.verify_calls, "arfCommConfig_t.verify_calls = 1");
  auto* input_buffer = app.add_option("--input-buffer-percent", o.input_buffer_percent,
                                      "share of (call, rank) pairs whose input is the communicator's "
                                      "input buffer (zero-copy; default 33, replays 0)")
                           ->check(CLI::Range(0, 100));
  std::string reference = "rotate";
  app.add_option("--reference", reference,
                 "rotate: each call's expected outputs recomputed on one rank (call % world), the "
                 "others' outputs compared with it by hash; split: every rank recomputes its share "
                 "of the rows (the same coverage, the cost spread); all: recomputed on every rank")
      ->check(CLI::IsMember({"rotate", "split", "all"}))->capture_default_str();
  app.add_flag("--pdl", o.pdl, "arfCommConfig_t.programmatic_launch = 1");
  app.add_option("--hang-seconds", o.hang_seconds, "watchdog: exit 2 when no call completes this long")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--progress", o.progress_seconds, "seconds between progress lines (0: none)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--poll-every", o.poll_every, "calls between arfCommGetAsyncError polls")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("-J,--json", o.json_path, "write the report as JSON");
  app.add_flag("--expect-failure", o.expect_failure,
               "negative control: exit 0 only if a timeout, async error or wrong element was seen");
  app.add_flag("--list-boundaries", o.list_boundaries, "print the probed plan boundaries and exit");
  app.add_option("--write-schedule", o.write_schedule, "write the issued calls as a replayable CSV");
  app.add_option("--replay", o.replay_path, "replay a call sequence (the --write-schedule CSV format)");
  app.add_option("--repeat", o.repeat, "run the sequence this many times on fresh communicators")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--table-calls", o.table_calls,
                 "slots of the per-call hash table (0: the call budget, else 2^20; later calls fold in)");
  app.add_option("--hash-dir", o.hash_dir,
                 "under arfusion-run: directory of the per-rank hash files (default: "
                 "$TMPDIR/arfusion-stress-<job id>)");
  devices->excludes(nr);
  try {
    app.parse(argc, argv);
    o.dtype = dtype == "fp16" ? arfFloat16 : arfBFloat16;
    o.reference = reference == "all"     ? ReferenceMode::kAll
                  : reference == "split" ? ReferenceMode::kSplit
                                         : ReferenceMode::kRotate;
    o.mix = mix == "volume" ? TokenMix::kVolume : TokenMix::kEngine;
    if (!o.replay_path.empty() && input_buffer->count() == 0) o.input_buffer_percent = 0;
    o.patterns = parse_pattern_list(patterns);
    AlgorithmDraw draw = parse_algorithm_list(algos);
    o.algos = std::move(draw.algos);
    o.algo_weights = std::move(draw.weights);
    validate(o, nranks, devices->count() > 0 || nr->count() > 0, hiddens, env);
    validate_sandwich(o, env);
    std::vector<std::string> rank_stream_options;
    for (CLI::Option* opt : {foreign_block, foreign_smem, foreign_grid, time_segments}) {
      if (opt->count() > 0) rank_stream_options.push_back(opt->get_name());
    }
    if (in_flight->count() > 0) rank_stream_options.push_back(in_flight->get_name());
    validate_co_resident(o, rank_stream_options, env);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e) == 0 ? kStressOk : kStressSetup;
    return std::nullopt;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arfusion-stress: %s\n", e.what());
    *exit_code = kStressSetup;
    return std::nullopt;
  }
  return o;
}

StepOptions step_options(const StressOptions& o) {
  StepOptions s;
  s.graphs = o.graphs;
  s.window = o.window;
  return s;
}

ScheduleOptions schedule_options(const StressOptions& o) {
  ScheduleOptions so;
  so.seed = o.seed;
  so.dtype = o.dtype;
  so.patterns = o.patterns;
  so.algos = o.algos;
  so.algo_weights = o.algo_weights;
  so.hiddens = o.hiddens;
  so.max_tokens = o.max_tokens;
  so.mix = o.mix;
  so.sandwich_share = o.sandwich_share;
  return so;
}

}  // namespace arf::stress
