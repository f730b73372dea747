// CLI11 parsing of the arfusion-stress command line (args.h).
#include "args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "export/tool_api.h"
#include "schedule.h"

namespace arf::stress {
namespace {

const std::map<std::string, arfDataType_t> kDtypes = {
    {"bf16", arfBFloat16}, {"bfloat16", arfBFloat16}, {"fp16", arfFloat16}, {"half", arfFloat16}};
constexpr const char* kDefaultAlgos = "oneshot_lamport,oneshot_pull,twoshot,unfused,auto";
constexpr const char* kDefaultPatterns = "allreduce,residual_rmsnorm";
constexpr int kDefaultVirtualRanks = 8;

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Names resolve through the library's own table, so the spelling is the API's.
std::vector<arfAlgorithm_t> parse_algos(const std::string& list) {
  std::vector<arfAlgorithm_t> algos;
  for (const std::string& name : split(list)) {
    arfAlgorithm_t algo;
    if (arfAlgorithmFromName(name.c_str(), &algo) != arfSuccess || algo == arfAlgoNccl) {
      throw CLI::ValidationError("--algos", "unknown or unsupported algorithm '" + name + "'");
    }
    if (std::find(algos.begin(), algos.end(), algo) == algos.end()) algos.push_back(algo);
  }
  if (algos.empty()) throw CLI::ValidationError("--algos", "at least one algorithm");
  return algos;
}

std::vector<arfPattern_t> parse_patterns(const std::string& list) {
  std::vector<arfPattern_t> patterns;
  for (const std::string& name : split(list)) {
    arfPattern_t p;
    if (name == arfPatternName(arfPatternAllReduce)) {
      p = arfPatternAllReduce;
    } else if (name == arfPatternName(arfPatternResidualRmsNorm)) {
      p = arfPatternResidualRmsNorm;
    } else {
      throw CLI::ValidationError("--patterns", "unknown pattern '" + name + "'");
    }
    if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) patterns.push_back(p);
  }
  if (patterns.empty()) throw CLI::ValidationError("--patterns", "at least one pattern");
  return patterns;
}

void add_world_options(CLI::App& app, StressArgs& a, int& nranks) {
  auto* devices = app.add_option("--devices", a.devices,
                                 "rank r runs on device list[r]; repeats = virtual ranks "
                                 "(default: 8 virtual ranks on device 0)")
                      ->delimiter(',');
  app.add_option("--nranks", nranks, "N virtual ranks on device 0")
      ->check(CLI::Range(1, ARF_MAX_RANKS))
      ->excludes(devices);
  app.add_option("-d,--datatype", a.dtype, "bf16 | fp16")
      ->transform(CLI::CheckedTransformer(kDtypes))
      ->option_text("TYPE [bf16]");
  app.add_option("--hidden", a.hidden, "columns per token")->capture_default_str();
  app.add_option("--max-tokens", a.max_tokens, "communicator capacity; largest token count")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--oneshot-max-tokens", a.oneshot_max_tokens,
                 "Lamport buffer capacity in tokens (0: max-tokens)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--timeout", a.timeout_seconds, "bound of every device wait, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

void add_soak_options(CLI::App& app, StressArgs& a, std::string& algos, std::string& patterns) {
  app.add_option("-a,--algos", algos, "comma-separated algorithms")->capture_default_str();
  app.add_option("--patterns", patterns, "comma-separated patterns")->capture_default_str();
  auto* calls = app.add_option("-n,--calls", a.calls, "call budget (0: until --seconds or Ctrl-C)")
                    ->capture_default_str();
  app.add_option("--calls-per-algorithm", a.calls_per_algorithm,
                 "call budget of N calls of every (algorithm, pattern) combination: --calls = N x "
                 "algorithms x patterns (eager calls come out exactly N per combination)")
      ->check(CLI::PositiveNumber)
      ->excludes(calls);
  app.add_option("--seconds", a.seconds, "time budget (0: none)")->check(CLI::NonNegativeNumber);
  app.add_option("--seed", a.seed, "seed of the call sequence and the data")->capture_default_str();
  app.add_option("--sets", a.num_sets, "data sets in the device ring (multiple of 4)")
      ->check(CLI::Range(kGammaKinds, 1024))
      ->capture_default_str();
  app.add_option("--skew-us", a.skew_us, "each rank sleeps up to this long before each step")
      ->check(CLI::Range(0, 10000000))
      ->capture_default_str();
  app.add_option("-G,--graphs", a.num_graphs,
                 "0: eager calls; N: capture N windows of --window calls (+ consumers) per rank "
                 "and replay them in random order with new inputs, mixed with eager calls")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--window", a.window, "calls per captured graph")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
}

void add_check_options(CLI::App& app, StressArgs& a, std::string& verifier) {
  app.add_option("--ring", a.ring_depth, "steps in flight to the verifier threads")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_option("--verify-threads", a.verify_threads, "host verifier threads (0: auto)")
      ->check(CLI::Range(0, 256));
  app.add_option("--verify", verifier,
                 "host: host threads against the CPU reference (default, the independent "
                 "reference); gpu: check kernels against a device reference at GPU speed (every "
                 "rank on one device)")
      ->check(CLI::IsMember({"host", "gpu"}))
      ->capture_default_str();
  app.add_option("--hang-seconds", a.hang_seconds, "watchdog: exit 2 when nothing is verified "
                 "for this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--progress", a.progress_seconds, "seconds between progress lines (0: none)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--expect-corruption", a.expect_corruption,
               "negative control: exit 0 only if wrong elements are found (no timeout), 1 if "
               "none are; stops at the first wrong call");
  app.add_flag("--stop-on-wrong", a.stop_on_wrong, "stop at the first wrong call");
  app.add_flag("--list-boundaries", a.list_boundaries,
               "print every combination's dispatch boundaries (from arfPlan) and exit");
  app.add_option("-J,--json", a.json_path, "write the summary as JSON to FILE");
}

// Under arfusion-run each process is one rank. What needs the ranks in one process is refused:
// a stop at a common step (time budget, first wrong call) and the GPU verifier (one device).
void apply_launcher(StressArgs& a, int nranks, const std::string& verifier) {
  Result<EnvPlacement> place = placement_from_env();
  if (!place.is_ok()) {
    throw CLI::ValidationError("arfusion-run environment", place.status().message());
  }
  const char* why = nullptr;
  if (!a.devices.empty() || nranks > 0) why = "--devices/--nranks: the launcher places the ranks";
  if (verifier == "gpu") why = "--verify gpu checks ranks that share one process and device";
  if (a.seconds > 0) why = "--seconds: ranks in different processes stop on a call budget only";
  if (a.calls == 0 && a.calls_per_algorithm == 0) why = "--calls 0: give a call budget";
  if (a.expect_corruption || a.stop_on_wrong) {
    why = "--expect-corruption/--stop-on-wrong stop at a step the processes cannot agree on";
  }
  if (why != nullptr) throw CLI::ValidationError("under arfusion-run", why);
  a.process_rank = place.value().rank;
  a.process_world = place.value().world_size;
  a.devices = {place.value().device};
}

void validate(StressArgs& a, int nranks, const std::string& verifier) {
  if (std::getenv(kEnvRendezvousId) != nullptr) apply_launcher(a, nranks, verifier);
  if (a.hidden < 8 || a.hidden % 8 != 0 || a.hidden > 16384) {
    throw CLI::ValidationError("--hidden", "must be a multiple of 8 in [8, 16384]");
  }
  if (a.num_sets % kGammaKinds != 0) {
    throw CLI::ValidationError("--sets", "must be a multiple of " + std::to_string(kGammaKinds));
  }
  if (a.devices.empty()) a.devices.assign(nranks > 0 ? nranks : kDefaultVirtualRanks, 0);
  if (a.world() > ARF_MAX_RANKS) throw CLI::ValidationError("--devices", "at most 8 ranks");
  if (a.processes() && a.process_world < 1) throw CLI::ValidationError("ARF_WORLD_SIZE", ">= 1");
  for (int d : a.devices) {
    if (d < 0) throw CLI::ValidationError("--devices", "device ordinals are >= 0");
  }
  if (a.expect_corruption) a.stop_on_wrong = true;
  a.verify_gpu = verifier == "gpu";
  if (a.verify_gpu && std::any_of(a.devices.begin(), a.devices.end(),
                                  [&](int d) { return d != a.devices.front(); })) {
    throw CLI::ValidationError("--verify", "gpu needs every rank on one device (virtual ranks)");
  }
  if (a.calls_per_algorithm > 0) {
    a.calls = a.calls_per_algorithm * a.algos.size() * a.patterns.size();
  }
}

}  // namespace

std::vector<int> StressArgs::local_ranks() const {
  if (processes()) return {process_rank};
  std::vector<int> ranks(devices.size());
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = static_cast<int>(r);
  return ranks;
}

namespace {

std::string join_argv(int argc, char** argv) {
  std::ostringstream out;
  for (int i = 0; i < argc; ++i) out << (i ? " " : "") << argv[i];
  return out.str();
}

}  // namespace

std::optional<StressArgs> parse_args(int argc, char** argv, int* exit_code) {
  StressArgs a;
  std::string algos = kDefaultAlgos, patterns = kDefaultPatterns, verifier = "host";
  int nranks = 0;
  CLI::App app{
      "arfusion-stress: the refill soak. Back-to-back fused calls of every algorithm and pattern,\n"
      "a new token count every call (both sides of every dispatch boundary), distinct data per\n"
      "rank and call, inputs overwritten right after each call, host skew; every output checked\n"
      "against the CPU reference and across ranks.\n"
      "Exit: 0 clean, 1 wrong elements, 2 timeout/hang, 3 setup error, 77 no GPU."};
  add_world_options(app, a, nranks);
  add_soak_options(app, a, algos, patterns);
  add_check_options(app, a, verifier);
  try {
    app.parse(argc, argv);
    a.algos = parse_algos(algos);
    a.patterns = parse_patterns(patterns);
    validate(a, nranks, verifier);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    if (*exit_code != 0) *exit_code = kExitSetup;
    return std::nullopt;
  }
  a.command_line = join_argv(argc, argv);
  return a;
}

}  // namespace arf::stress
