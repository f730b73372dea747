// Command line of arfusion-bench: nccl-tests vocabulary (-b -e -f -n -w -c -G -d -J) plus the
// fused-op axes (--op, -a, --hidden, --tokens, --devices), the quant axes (--quant,
// --scale-layout, --scale-format) and --tune-out (tune.h). Parsing is pure host code, so it runs
// and can be tested on a machine without a GPU; device defaults are resolved later (devices.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arfusion/arfusion.h"

namespace arf::bench {

enum class Op { kAllReduce, kFused, kEpilogue, kQuant };

// One quantized pattern with its scale storage, as --op quant times it.
struct QuantVariant {
  arfPattern_t pattern = arfPatternResidualRmsNormFp8PerGroup;
  arfScaleLayout_t layout = arfScaleRowMajor;
  arfScaleFormat_t format = arfScaleFp32;

  bool operator==(const QuantVariant&) const = default;
};

// "fp8_group/mn/ue8m0", "nvfp4/swizzled", "fp8_token": the --quant name plus what varies.
std::string quant_variant_label(const QuantVariant& v);

const char* op_name(Op op);

struct BenchArgs {
  Op op = Op::kFused;
  // All-reduce sweep (--op allreduce): bytes per rank from min to max, times step each row.
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 64 << 20;
  int64_t step_factor = 2;
  // Token sweep (--op fused / epilogue).
  std::vector<int64_t> tokens;         // resolved: --tokens, else powers of two tmin..tmax
  int64_t hidden = 8192;               // the largest of `hiddens` (buffer and gamma capacity)
  std::vector<int64_t> hiddens{8192};  // --hidden list; more than one only with --op quant
  std::vector<QuantVariant> quant;     // --op quant: resolved from --quant x layouts x formats
  arfDataType_t dtype = arfBFloat16;
  std::vector<arfAlgorithm_t> algos;  // resolved from -a
  int iters = 20;
  int warmup_iters = 5;
  int check = 1;          // 1: verify every (size, algorithm) before timing it
  int graph_replays = 1;  // 0: eager launches; N: capture `iters` calls, replay the graph N times
  int repeats = 1;        // timed regions per cell; the cell's time is their median
  std::string json_path;  // empty: no JSON
  std::string tune_out;   // --tune-out: tuning table file to merge this sweep's entry into (tune.h)
  // Ranks: explicit device list, or a rank count; neither = all visible GPUs (8 virtual if one).
  std::vector<int> devices;
  int num_ranks = 0;
  int64_t max_tokens = 0;  // communicator capacity; 0 = what the sweep needs
  bool dry_run = false;    // print the resolved sweep and exit before touching CUDA
  bool pdl = false;        // --pdl: communicators launch with programmatic dependent launch
  int max_ctas = 0;        // --max-ctas: arfCommConfig_t::max_ctas (0: no bound)
  bool input_buffer = false;  // --input-buffer: inputs in the communicators' input buffers (zero-copy)
  std::string command_line;
};

// Parses argv. On --help or a parse error returns nullopt and sets *exit_code (0 for --help, the
// CLI11 code otherwise) after printing the message, as CLI11's app.exit() does.
std::optional<BenchArgs> parse_args(int argc, char** argv, int* exit_code);

// The rows the sweep visits: element counts per rank for --op allreduce (multiples of 8), token
// counts otherwise.
std::vector<int64_t> allreduce_counts(const BenchArgs& args);

// Row width used to express a flat all-reduce of `count` elements as tokens x row_elems for
// arfFusedAllReduce (which takes a shape, and a forced algorithm, unlike arfAllReduce): the largest
// multiple-of-8 divisor of count that is <= hidden.
int64_t allreduce_row_elems(int64_t count, int64_t hidden);

size_t dtype_size(arfDataType_t dtype);
const char* dtype_name(arfDataType_t dtype);

}  // namespace arf::bench
