// CLI11 parsing of the arfusion-bench command line (flags documented in --help and in args.h).
#include "args.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <map>
#include <sstream>

#include "ops.h"

namespace arf::bench {
namespace {

// --op's names: the op descriptors' (ops.h).
std::map<std::string, Op> op_names() {
  std::map<std::string, Op> names;
  for (const OpDescriptor& d : op_descriptors()) names.emplace(d.name, d.op);
  return names;
}
// nccl-tests spells the types bfloat16/half; our tables print bf16/fp16. Accept both.
const std::map<std::string, arfDataType_t> kDtypes = {
    {"bf16", arfBFloat16}, {"bfloat16", arfBFloat16}, {"fp16", arfFloat16}, {"half", arfFloat16}};
constexpr const char* kDefaultAlgos = "oneshot_lamport,oneshot_pull,twoshot,unfused,auto";

// --quant names, in the order the default sweep visits them, with the row block each needs.
struct QuantName {
  const char* name;
  arfPattern_t pattern;
  int64_t block;  // hidden must be a multiple of this (8: any legal hidden)
};
constexpr QuantName kQuantNames[] = {
    {"fp8_tensor", arfPatternResidualRmsNormFp8PerTensor, 8},
    {"fp8_token", arfPatternResidualRmsNormFp8PerToken, 8},
    {"fp8_group", arfPatternResidualRmsNormFp8PerGroup, 128},
    {"nvfp4", arfPatternResidualRmsNormNvfp4, 16},
    {"mxfp4", arfPatternResidualRmsNormMxfp4, 32},
};
const std::map<std::string, arfScaleLayout_t> kLayouts = {
    {"row", arfScaleRowMajor}, {"mn", arfScaleMnMajor}, {"swizzled", arfScaleSwizzled128x4}};
const std::map<std::string, arfScaleFormat_t> kFormats = {
    {"fp32", arfScaleFp32}, {"ue8m0", arfScaleUe8m0AsFp32}, {"ue8m0_packed", arfScaleUe8m0Packed}};

// The --quant axes as typed, resolved into BenchArgs::quant after parsing.
struct QuantFlags {
  std::vector<std::string> patterns{"fp8_tensor", "fp8_token", "fp8_group", "nvfp4", "mxfp4"};
  std::vector<std::string> layouts{"row"};
  std::vector<std::string> formats{"fp32"};
};

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

template <typename T>
std::vector<T> lookup_all(const std::map<std::string, T>& table,
                          const std::vector<std::string>& names, const char* flag) {
  std::vector<T> values;
  for (const std::string& name : names) {
    auto it = table.find(name);
    if (it == table.end()) throw CLI::ValidationError(flag, "unknown name '" + name + "'");
    if (std::find(values.begin(), values.end(), it->second) == values.end())
      values.push_back(it->second);
  }
  return values;
}

const QuantName& quant_name(const std::string& name) {
  for (const QuantName& q : kQuantNames) {
    if (name == q.name) return q;
  }
  throw CLI::ValidationError("--quant", "unknown quant pattern '" + name + "'");
}

// The layouts of `wanted` that `pattern` can write: MN-major is per-group FP8's, 128x4-swizzled is
// the FP4 formats'; per-tensor and per-token scales have one layout only.
std::vector<arfScaleLayout_t> layouts_for(arfPattern_t pattern,
                                          const std::vector<arfScaleLayout_t>& wanted) {
  if (pattern == arfPatternResidualRmsNormFp8PerTensor ||
      pattern == arfPatternResidualRmsNormFp8PerToken) {
    return {arfScaleRowMajor};
  }
  const bool fp4 = pattern != arfPatternResidualRmsNormFp8PerGroup;
  std::vector<arfScaleLayout_t> out;
  for (arfScaleLayout_t l : wanted) {
    if (l == arfScaleRowMajor || l == (fp4 ? arfScaleSwizzled128x4 : arfScaleMnMajor))
      out.push_back(l);
  }
  return out;
}

// Cartesian product of the quant axes, keeping the combinations the API defines; a selected
// pattern left with no layout, or a hidden size it cannot take, is an error here rather than a
// column of n/a cells after minutes of setup.
std::vector<QuantVariant> resolve_quant(const QuantFlags& f, const std::vector<int64_t>& hiddens) {
  const auto layouts = lookup_all(kLayouts, f.layouts, "--scale-layout");
  const auto formats = lookup_all(kFormats, f.formats, "--scale-format");
  std::vector<QuantVariant> variants;
  for (const std::string& name : f.patterns) {
    const QuantName& q = quant_name(name);
    for (int64_t h : hiddens) {
      if (h % q.block != 0) {
        throw CLI::ValidationError("--hidden", name + " needs hidden % " + std::to_string(q.block) +
                                                   " == 0; hidden is " + std::to_string(h));
      }
    }
    const auto pattern_layouts = layouts_for(q.pattern, layouts);
    if (pattern_layouts.empty())
      throw CLI::ValidationError("--scale-layout", "no listed layout applies to " + name);
    const bool grouped = q.pattern == arfPatternResidualRmsNormFp8PerGroup;
    for (arfScaleLayout_t layout : pattern_layouts) {
      for (arfScaleFormat_t format : grouped ? formats : std::vector{arfScaleFp32}) {
        const QuantVariant v{q.pattern, layout, format};
        if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
      }
    }
  }
  if (variants.empty()) throw CLI::ValidationError("--quant", "at least one pattern");
  return variants;
}

void add_quant_options(CLI::App& app, QuantFlags& q) {
  app.add_option("--quant", q.patterns,
                 "--op quant: comma-separated patterns fp8_tensor,fp8_token,fp8_group,nvfp4,mxfp4")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--scale-layout", q.layouts,
                 "--op quant: row | mn (fp8_group) | swizzled (nvfp4, mxfp4); a list sweeps each "
                 "pattern over the layouts it takes")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--scale-format", q.formats,
                 "--op quant: fp8_group scale storage fp32 | ue8m0 | ue8m0_packed (a list sweeps)")
      ->delimiter(',')
      ->capture_default_str();
}

void add_sweep_options(CLI::App& app, BenchArgs& a, std::string& algos, int64_t& tmin,
                       int64_t& tmax) {
  app.add_option("--op", a.op,
                 "allreduce | fused (all-reduce+residual+RMSNorm) | epilogue (world 1)")
      ->transform(CLI::CheckedTransformer(op_names()))
      ->option_text("OP [fused]");
  // quant: per quant pattern, 3 vs 2 vs 1 kernels (+ bf16 side output): what fusing saves over the
  // forms an engine would otherwise run.
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
  app.add_option("--hidden", a.hiddens,
                 "columns per token (row width); --op quant takes a list (7168,8192)")
      ->delimiter(',')
      ->capture_default_str();
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
  app.add_option("-R,--repeats", a.repeats,
                 "timed regions per cell (one warm-up and capture): the cell's time is their median, "
                 "the JSON keeps each one and the spread")
      ->check(CLI::PositiveNumber)
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
  app.add_option("--tune-out", a.tune_out,
                 "--op fused: pick the fastest algorithm per token count (ties within 1% to the "
                 "simpler) and merge that table entry into FILE, which ARF_TUNING_TABLE loads");
  app.add_flag("--dry-run", a.dry_run, "print the resolved sweep and exit without using CUDA");
  app.add_option("--max-ctas", a.max_ctas,
                 "arfCommConfig_t::max_ctas: at most N CTAs per call on a GPU (0: no bound)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--pdl", a.pdl,
               "launch the library's kernels with programmatic dependent launch "
               "(arfCommConfig_t::programmatic_launch)");
  app.add_flag("--input-buffer", a.input_buffer,
               "every rank's input is its communicator's input buffer (arfCommGetInputBuffer: peers "
               "read it in place, no copy-in); one input set");
}

// --tune-out derives a table from the fused sweep (tune.h): the sweep must be one a table can be
// built from, and must time at least one algorithm a table may name.
void check_tune_args(const BenchArgs& a) {
  const OpDescriptor& op = op_descriptor(a.op);
  if (!op.tune_group) {
    throw CLI::ValidationError("--tune-out", "only with --op fused or --op quant");
  }
  if (a.tokens.front() != 1 || !std::is_sorted(a.tokens.begin(), a.tokens.end()) ||
      std::adjacent_find(a.tokens.begin(), a.tokens.end()) != a.tokens.end()) {
    throw CLI::ValidationError("--tune-out", "token counts must increase from 1");
  }
  if (op.quant_variants) {
    // A table keys quant entries by hidden, not by pattern: one variant and one hidden per run.
    if (a.quant.size() != 1 || a.hiddens.size() != 1) {
      throw CLI::ValidationError("--tune-out",
                                 "--op quant needs exactly one --quant variant (pattern, layout, "
                                 "format) and one --hidden");
    }
    return;
  }
  const bool candidate = std::any_of(a.algos.begin(), a.algos.end(), [](arfAlgorithm_t x) {
    return x == arfAlgoOneshotLamport || x == arfAlgoOneshotPull || x == arfAlgoTwoshot ||
           x == arfAlgoUnfused || x == arfAlgoNccl;
  });
  if (!candidate) {
    throw CLI::ValidationError("--tune-out",
                               "-a must include oneshot_lamport, oneshot_pull, twoshot or unfused");
  }
}

// Checks that CLI11's per-option validators cannot express (they span options), and resolves the
// lists. Throws CLI::ValidationError.
void finish_args(const CLI::App& app, const std::string& algos, int64_t tmin, int64_t tmax,
                 const QuantFlags& quant, BenchArgs& a) {
  for (int64_t h : a.hiddens) {
    if (h < 8 || h % 8 != 0)
      throw CLI::ValidationError("--hidden", "must be a positive multiple of 8");
  }
  if (a.hiddens.empty()) throw CLI::ValidationError("--hidden", "at least one hidden size");
  const OpDescriptor& op = op_descriptor(a.op);
  if (!op.quant_variants && a.hiddens.size() > 1)
    throw CLI::ValidationError("--hidden", "a list of hidden sizes needs --op quant");
  a.hidden = *std::max_element(a.hiddens.begin(), a.hiddens.end());
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
  // A quant flag on another op would be silently ignored; say so instead.
  for (const char* flag : {"--quant", "--scale-layout", "--scale-format"}) {
    if (!op.quant_variants && app.count(flag) > 0)
      throw CLI::ValidationError(flag, "only with --op quant");
  }
  if (op.quant_variants) a.quant = resolve_quant(quant, a.hiddens);
  if (!a.tune_out.empty()) check_tune_args(a);
}

}  // namespace

std::string quant_variant_label(const QuantVariant& v) {
  std::string label = "?";
  for (const QuantName& q : kQuantNames) {
    if (q.pattern == v.pattern) label = q.name;
  }
  if (v.pattern == arfPatternResidualRmsNormFp8PerTensor ||
      v.pattern == arfPatternResidualRmsNormFp8PerToken) {
    return label;
  }
  for (const auto& [name, layout] : kLayouts) {
    if (layout == v.layout) label += "/" + name;
  }
  if (v.pattern != arfPatternResidualRmsNormFp8PerGroup) return label;
  for (const auto& [name, format] : kFormats) {
    if (format == v.format) label += "/" + name;
  }
  return label;
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
  QuantFlags quant;
  CLI::App app{"arfusion-bench: fused all-reduce + residual + RMSNorm, nccl-tests style"};
  add_sweep_options(app, a, algos, tmin, tmax);
  add_quant_options(app, quant);
  add_run_options(app, a);
  try {
    app.parse(argc, argv);
    finish_args(app, algos, tmin, tmax, quant, a);
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
