// CLI11 parsing of the arfusion-bench command line (flags documented in --help and in args.h).
#include "args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <sstream>

namespace arf::bench {
namespace {

const std::map<std::string, Op> kOps = {
    {"allreduce", Op::kAllReduce}, {"fused", Op::kFused}, {"epilogue", Op::kEpilogue}};
// nccl-tests spells the types bfloat16/half; our tables print bf16/fp16. Accept both.
const std::map<std::string, arfDataType_t> kDtypes = {
    {"bf16", arfBFloat16}, {"bfloat16", arfBFloat16}, {"fp16", arfFloat16}, {"half", arfFloat16}};
constexpr const char* kDefaultAlgos = "oneshot_lamport,oneshot_pull,twoshot,unfused,auto";

std::string join_argv(int argc, char** argv) {
  std::ostringstream out;
  for (int i = 0; i < argc; ++i) out << (i ? " " : "") << argv[i];
  return out.str();
}

// Resolves -a names through the library's own table so the spelling is the one in the API.
std::vector<arfAlgorithm_t> parse_algos(const std::vector<std::string>& names) {
  std::vector<arfAlgorithm_t> algos;
  for (const std::string& name : names) {
    arfAlgorithm_t algo;
    if (arfAlgorithmFromName(name.c_str(), &algo) != arfSuccess) {
      throw CLI::ValidationError("--algos", "unknown algorithm '" + name + "'");
    }
    if (std::find(algos.begin(), algos.end(), algo) == algos.end()) algos.push_back(algo);
  }
  return algos;
}

std::vector<int64_t> token_sweep(int64_t tmin, int64_t tmax) {
  if (tmin < 1 || tmax < tmin)
    throw CLI::ValidationError("--tmin/--tmax", "need 1 <= tmin <= tmax");
  std::vector<int64_t> tokens;
  for (int64_t t = tmin; t <= tmax; t *= 2) tokens.push_back(t);
  return tokens;
}

void add_sweep_options(CLI::App& app, BenchArgs& a, std::string& algos, int64_t& tmin,
                       int64_t& tmax) {
  app.add_option("--op", a.op,
                 "allreduce | fused (all-reduce+residual+RMSNorm) | epilogue (world 1)")
      ->transform(CLI::CheckedTransformer(kOps))
      ->option_text("OP [fused]");
  app.add_option("-b,--minbytes", a.min_bytes, "allreduce: smallest size per rank (K/M/G suffixes)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("-e,--maxbytes", a.max_bytes, "allreduce: largest size per rank")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("-f,--stepfactor", a.step_factor, "allreduce: size multiplier per row")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option(
         "-a,--algos", algos,
         "comma-separated algorithms (auto = the planner's choice; --op epilogue times auto)")
      ->capture_default_str();
  app.add_option("--hidden", a.hidden, "columns per token (row width)")->capture_default_str();
  app.add_option("--tokens", a.tokens, "comma-separated token counts (overrides --tmin/--tmax)")
      ->delimiter(',');
  app.add_option("--tmin", tmin, "smallest token count of the power-of-two sweep")
      ->capture_default_str();
  app.add_option("--tmax", tmax, "largest token count of the power-of-two sweep")
      ->capture_default_str();
  app.add_option("-d,--datatype", a.dtype, "bf16 | fp16")
      ->transform(CLI::CheckedTransformer(kDtypes))
      ->option_text("TYPE [bf16]");
}

void add_run_options(CLI::App& app, BenchArgs& a) {
  app.add_option("-n,--iters", a.iters, "timed calls per measurement")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", a.warmup_iters, "untimed calls before each measurement")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-c,--check", a.check,
                 "1: verify each (size, algorithm) against the CPU reference")
      ->check(CLI::Range(0, 1))
      ->capture_default_str();
  app.add_option("-G,--cudagraph", a.graph_replays,
                 "0: eager; N: capture -n calls per rank into a CUDA graph, time N replays")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("-J,--json", a.json_path, "write every row and a header object to FILE");
  auto* devices = app.add_option("--devices", a.devices,
                                 "rank r runs on device list[r]; repeats = virtual ranks (0,0,0,0)")
                      ->delimiter(',');
  app.add_option("--nranks", a.num_ranks,
                 "ranks on devices r % visible GPUs (default: all GPUs; "
                 "8 virtual ranks when one GPU is visible)")
      ->check(CLI::Range(1, ARF_MAX_RANKS))
      ->excludes(devices);
  app.add_option("--max-tokens", a.max_tokens,
                 "communicator capacity in tokens (default: sweep max)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--dry-run", a.dry_run, "print the resolved sweep and exit without using CUDA");
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "allreduce";
    case Op::kFused:
      return "fused";
    case Op::kEpilogue:
      return "epilogue";
  }
  return "?";
}

size_t dtype_size(arfDataType_t dtype) { return dtype == arfFloat32 ? 4 : 2; }

const char* dtype_name(arfDataType_t dtype) {
  switch (dtype) {
    case arfBFloat16:
      return "bf16";
    case arfFloat16:
      return "fp16";
    case arfFloat32:
      return "fp32";
  }
  return "?";
}

std::optional<BenchArgs> parse_args(int argc, char** argv, int* exit_code) {
  BenchArgs a;
  std::string algos = kDefaultAlgos;
  int64_t tmin = 1, tmax = 4096;
  CLI::App app{"arfusion-bench: fused all-reduce + residual + RMSNorm, nccl-tests style"};
  add_sweep_options(app, a, algos, tmin, tmax);
  add_run_options(app, a);
  try {
    app.parse(argc, argv);
    if (a.hidden < 8 || a.hidden % 8 != 0) {
      throw CLI::ValidationError("--hidden", "must be a positive multiple of 8");
    }
    if (a.min_bytes < 1 || a.max_bytes < a.min_bytes) {
      throw CLI::ValidationError("-b/-e", "need 1 <= minbytes <= maxbytes");
    }
    if (a.tokens.empty()) a.tokens = token_sweep(tmin, tmax);
    for (int64_t t : a.tokens) {
      if (t < 1) throw CLI::ValidationError("--tokens", "token counts must be >= 1");
    }
    std::vector<std::string> names;
    std::stringstream list(algos);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) names.push_back(name);
    }
    a.algos = parse_algos(names);
    if (a.algos.empty()) throw CLI::ValidationError("--algos", "at least one algorithm");
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return std::nullopt;
  }
  a.command_line = join_argv(argc, argv);
  return a;
}

std::vector<int64_t> allreduce_counts(const BenchArgs& args) {
  const int64_t elem = static_cast<int64_t>(dtype_size(args.dtype));
  std::vector<int64_t> counts;
  for (int64_t bytes = args.min_bytes; bytes <= args.max_bytes; bytes *= args.step_factor) {
    // The API takes multiples of 8 elements (one 16-byte vector); round down, never below 8.
    const int64_t count = std::max<int64_t>(8, bytes / elem / 8 * 8);
    if (counts.empty() || counts.back() != count) counts.push_back(count);
  }
  return counts;
}

int64_t allreduce_row_elems(int64_t count, int64_t hidden) {
  for (int64_t row = std::min(count, hidden) / 8 * 8; row >= 8; row -= 8) {
    if (count % row == 0) return row;
  }
  return 8;  // count is a multiple of 8, so this is only reached for count < 8 (never)
}

}  // namespace arf::bench
