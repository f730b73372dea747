// Argument validation (see validate.h). Every message names the argument and the values involved,
// because the caller usually sees only arfGetLastErrorString().
#include "core/validate.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/quant_rules.h"
#include "common/kernel_params.h"

namespace arf {
namespace {

constexpr uintptr_t kAlignBytes = 16;

// arfFusedArgs_t as API version 1 declared it. Version-1 callers pass structs of this size;
// kFusedArgsV1Bytes must stay equal to it, or they would be refused (or misread).
struct FusedArgsV1 {
  size_t struct_size;
  unsigned version;
  arfPattern_t pattern;
  arfAlgorithm_t algorithm;
  arfDataType_t dtype;
  size_t num_tokens;
  size_t hidden;
  const void* input;
  void* allreduce_out;
  const void* residual_in;
  void* residual_out;
  void* norm_out;
  const void* gamma;
  arfDataType_t gamma_dtype;
  int gamma_plus_one;
  float eps;
};
static_assert(sizeof(FusedArgsV1) == kFusedArgsV1Bytes,
              "version-1 arfFusedArgs_t layout changed: version-1 callers would break");
// A version-4 caller's sizeof(arfFusedArgs_t) ended at norm_rounding rounded up to the struct's
// alignment; version 5's scale_rule must start exactly there, or that size would not be
// kFusedArgsV4Bytes (and a version-4 struct would be refused or misread).
static_assert(kFusedArgsV4Bytes ==
                  (offsetof(arfFusedArgs_t, norm_rounding) + sizeof(arfNormRounding_t) +
                   alignof(arfFusedArgs_t) - 1) / alignof(arfFusedArgs_t) * alignof(arfFusedArgs_t),
              "arfFusedArgs_t::scale_rule does not start where the version-4 struct ended");
static_assert(sizeof(arfFusedArgs_t) > kFusedArgsV4Bytes);
// Likewise version 6's post_gamma starts where the version-5 struct (ending at scale_rule) ended.
static_assert(kFusedArgsV5Bytes ==
                  (offsetof(arfFusedArgs_t, scale_rule) + sizeof(arfFp8ScaleRule_t) +
                   alignof(arfFusedArgs_t) - 1) / alignof(arfFusedArgs_t) * alignof(arfFusedArgs_t),
              "arfFusedArgs_t::post_gamma does not start where the version-5 struct ended");
static_assert(sizeof(arfFusedArgs_t) > kFusedArgsV5Bytes);

const char* dtype_name(int dtype) {
  switch (dtype) {
    case arfBFloat16: return "bf16";
    case arfFloat16: return "fp16";
    case arfFloat32: return "fp32";
  }
  return "invalid";
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIxPTR, reinterpret_cast<uintptr_t>(p));
  return buf;
}

// A tensor the call touches: [ptr, ptr + bytes).
struct Range {
  const char* name;
  const void* ptr;
  uint64_t bytes;
  bool is_output;
  uintptr_t align = kAlignBytes;  // 16: the kernels move 16-byte vectors; 4 for a fp32 scalar
};

std::string describe(const Range& r) {
  return std::string(r.name) + " [" + hex(r.ptr) + ", +" + std::to_string(r.bytes) + " bytes)";
}

bool overlaps(const Range& a, const Range& b) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a.ptr), b0 = reinterpret_cast<uintptr_t>(b.ptr);
  return a0 < b0 + b.bytes && b0 < a0 + a.bytes;
}

// The in-place forms the kernels support: each output element is written only after the aliased
// input element at the same index has been read by this rank (and pushed/copied for peers).
bool legal_alias(const Range& out, const Range& other) {
  const std::string o = out.name, x = other.name;
  return (o == "allreduce_out" && x == "input") || (o == "residual_out" && x == "residual_in") ||
         (o == "norm_out" && x == "input");
}

Status check_pointers(const std::vector<Range>& ranges, const char* pattern) {
  for (const Range& r : ranges) {
    if (r.ptr == nullptr) {
      return invalid_argument(std::string(r.name) + " is NULL (required by pattern " + pattern + ")");
    }
    if (reinterpret_cast<uintptr_t>(r.ptr) % r.align != 0) {
      return invalid_argument(std::string(r.name) + " " + hex(r.ptr) + " is not " +
                              std::to_string(r.align) + "-byte aligned" +
                              (r.align == kAlignBytes ? " (the kernels move 16-byte vectors)"
                                                      : " (an fp32 scalar)"));
    }
  }
  return Status::ok();
}

// Every output must be disjoint from every other tensor, except the exact legal aliases.
Status check_aliasing(const std::vector<Range>& ranges) {
  for (size_t i = 0; i < ranges.size(); ++i) {
    for (size_t j = 0; j < ranges.size(); ++j) {
      const Range& out = ranges[i];
      const Range& other = ranges[j];
      if (i == j || !out.is_output || (other.is_output && j < i)) continue;
      if (!overlaps(out, other)) continue;
      if (legal_alias(out, other) && out.ptr == other.ptr) continue;
      std::string msg = "illegal aliasing: " + describe(out) + " overlaps " + describe(other);
      if (legal_alias(out, other)) {
        msg += std::string(" (only exact equality ") + out.name + " == " + other.name +
               " is allowed)";
      }
      return invalid_argument(msg);
    }
  }
  return Status::ok();
}

// validate.h InputBuffer: the input may start at the buffer's base; nothing else may touch it.
// On every call's path: no allocation unless a range overlaps the buffer.
Status check_input_buffer(const std::vector<Range>& ranges, const InputBuffer& buffer) {
  if (buffer.ptr == nullptr) return Status::ok();
  const Range region{"the communicator's input buffer", buffer.ptr, buffer.bytes, false};
  auto is_input = [](const Range& r) { return std::strcmp(r.name, "input") == 0; };
  const bool input_there = std::any_of(ranges.begin(), ranges.end(),
                                       [&](const Range& r) { return is_input(r) && r.ptr == buffer.ptr; });
  for (const Range& r : ranges) {
    if (!overlaps(r, region)) continue;
    if (is_input(r) && r.ptr == buffer.ptr && r.bytes <= buffer.bytes) continue;
    std::string msg = describe(r) + " overlaps " + describe(region);
    if (is_input(r) && r.ptr == buffer.ptr) {
      msg += ": the input is larger than the buffer (a call over max_tokens, which only the nccl "
             "algorithm runs, cannot take its input there)";
    } else if (is_input(r)) {
      msg += " (an input there must start at its base, as arfCommGetInputBuffer returns it)";
    } else if (input_there && r.ptr == buffer.ptr) {
      msg += ": an output may not alias an input that is the input buffer (peers read it while the "
             "call runs)";
    } else {
      msg += " (only a call's input may live there)";
    }
    return invalid_argument(msg);
  }
  return Status::ok();
}

Status check_devices(const std::vector<Range>& ranges, int device, const PointerCheck& check) {
  if (!check) return Status::ok();
  for (const Range& r : ranges) ARF_RETURN_IF_ERROR(check(r.ptr, r.name, device));
  return Status::ok();
}

bool known_args_size(size_t struct_size) {
  return struct_size == sizeof(arfFusedArgs_t) || struct_size == kFusedArgsV5Bytes ||
         struct_size == kFusedArgsV4Bytes ||
         struct_size == kFusedArgsV2Bytes || struct_size == kFusedArgsV1Bytes;
}

Status check_header(const arfFusedArgs_t& a, const StaticFacts& facts) {
  if (!known_args_size(a.struct_size)) {
    return invalid_argument("args->struct_size is " + std::to_string(a.struct_size) + ", expected " +
                            std::to_string(sizeof(arfFusedArgs_t)) + " (or " +
                            std::to_string(kFusedArgsV5Bytes) + " for API version 5, " +
                            std::to_string(kFusedArgsV4Bytes) + " for API version 4, " +
                            std::to_string(kFusedArgsV2Bytes) + " for API versions 2-3, " +
                            std::to_string(kFusedArgsV1Bytes) +
                            " for API version 1; initialise args with arfFusedArgsInit)");
  }
  if (a.version < 1 || a.version > ARF_API_VERSION) {
    return invalid_argument("args->version is " + std::to_string(a.version) +
                            ", this library supports API version " +
                            std::to_string(ARF_API_VERSION));
  }
  // The size says which fields exist, the version which header declared them: a mismatch means a
  // hand-built struct whose fields may not be where the caller thinks.
  // Version 3 changed arfCommConfig_t only: a version-2-sized args struct is version 2 or 3.
  const bool v1_size = a.struct_size == kFusedArgsV1Bytes;
  const bool v2_size = a.struct_size == kFusedArgsV2Bytes;
  const bool v4_size = a.struct_size == kFusedArgsV4Bytes;
  const bool v5_size = a.struct_size == kFusedArgsV5Bytes;
  const bool version_matches = v1_size   ? a.version == 1
                               : v2_size ? (a.version == 2 || a.version == 3)
                               : v4_size ? a.version == 4
                               : v5_size ? a.version == 5
                                         : a.version >= 6;
  if (!version_matches) {
    return invalid_argument("args->version " + std::to_string(a.version) + " does not match " +
                            "args->struct_size " + std::to_string(a.struct_size) + " (a version " +
                            (v1_size   ? std::string("1")
                             : v2_size ? "2 or 3"
                             : v4_size ? "4"
                             : v5_size ? "5"
                                       : "6") +
                            " struct)");
  }
  if (raw_enum(a.pattern) < arfPatternAllReduce || raw_enum(a.pattern) > arfPatternResidualRmsNormMxfp4) {
    return invalid_argument("args->pattern " + std::to_string(raw_enum(a.pattern)) +
                            " is not a valid arfPattern_t");
  }
  if (a.version < 2 && is_quant_pattern(static_cast<Pattern>(a.pattern))) {
    return invalid_argument(std::string("pattern ") + arfPatternName(a.pattern) +
                            " needs the quantization fields of API version 2, but args is a "
                            "version 1 struct (" + std::to_string(a.struct_size) +
                            " bytes); rebuild against this arfusion.h and use arfFusedArgsInit");
  }
  if (raw_enum(a.algorithm) < arfAlgoAuto || raw_enum(a.algorithm) > arfAlgoNccl) {
    return invalid_argument("args->algorithm " + std::to_string(raw_enum(a.algorithm)) +
                            " is not a valid arfAlgorithm_t");
  }
  if (raw_enum(a.dtype) != arfBFloat16 && raw_enum(a.dtype) != arfFloat16) {
    return invalid_argument("args->dtype " + std::to_string(raw_enum(a.dtype)) + " (" +
                            dtype_name(raw_enum(a.dtype)) + ") is not an activation dtype (bf16 or fp16)");
  }
  if (static_cast<int>(a.dtype) != static_cast<int>(facts.dtype)) {
    return invalid_argument(std::string("dtype mismatch: call ") + dtype_name(a.dtype) +
                            ", communicator " + dtype_name(static_cast<int>(facts.dtype)));
  }
  return Status::ok();
}

Status check_shape(const arfFusedArgs_t& a, const StaticFacts& facts) {
  const int64_t max_hidden = std::min<int64_t>(facts.max_hidden, kMaxHidden);
  if (a.hidden % kElemsPerVec != 0) {
    return invalid_argument("hidden " + std::to_string(a.hidden) +
                            " is not a multiple of 8 (16-byte rows)");
  }
  if (a.hidden < static_cast<size_t>(kElemsPerVec) || a.hidden > static_cast<size_t>(max_hidden)) {
    return invalid_argument("hidden " + std::to_string(a.hidden) + " is outside [8, " +
                            std::to_string(max_hidden) + "] (communicator max_hidden " +
                            std::to_string(facts.max_hidden) + ")");
  }
  if (a.num_tokens > static_cast<size_t>(INT32_MAX)) {
    return invalid_argument("num_tokens " + std::to_string(a.num_tokens) + " exceeds 2^31 - 1");
  }
  if (a.num_tokens > static_cast<size_t>(facts.max_tokens)) {
    // Over capacity only the nccl algorithm can run (it needs no workspace), and only where the
    // rows between its two kernels have a caller buffer to live in. Decided from the shape and the
    // agreed facts, so every rank reaches the same verdict.
    const std::string over = "num_tokens " + std::to_string(a.num_tokens) +
                             " exceeds the communicator's max_tokens " +
                             std::to_string(facts.max_tokens);
    if (!facts.nccl) {
      return invalid_argument(over + " (calls over capacity run on the nccl algorithm only, which "
                                     "this communicator does not have)");
    }
    if (raw_enum(a.algorithm) != arfAlgoAuto && raw_enum(a.algorithm) != arfAlgoNccl) {
      return invalid_argument(over + " (over capacity only algorithm auto or nccl can run it)");
    }
    if (is_quant_pattern(static_cast<Pattern>(raw_enum(a.pattern))) && a.norm_out == nullptr) {
      return invalid_argument(over + " (over capacity a quantized call runs on nccl and needs "
                                     "norm_out for the rows between its kernels)");
    }
  }
  return Status::ok();
}

// Shape-level rules of the quantized patterns and of the fallback level: checked even for an
// empty call, so that arfPlan and the call agree on what is legal whatever num_tokens is.
Status check_quant_shape(const arfFusedArgs_t& a) {
  const Pattern pattern = static_cast<Pattern>(a.pattern);
  const int fallback = raw_enum(a.fallback);
  if (fallback < arfFallbackAuto || fallback > arfFallbackThreeKernels) {
    return invalid_argument("args->fallback " + std::to_string(fallback) +
                            " is not a valid arfFallbackLevel_t");
  }
  if (std::string e = quant_scale_rule_error(pattern, raw_enum(a.scale_rule)); !e.empty()) {
    return invalid_argument(e);
  }
  if (!is_quant_pattern(pattern)) {
    if (fallback != arfFallbackAuto) {
      return invalid_argument("args->fallback " + std::to_string(fallback) +
                              " applies to quantized patterns only; pattern " +
                              arfPatternName(a.pattern) +
                              " takes arfFallbackAuto (algorithm unfused splits residual_rmsnorm)");
    }
    return Status::ok();
  }
  if (std::string e = quant_hidden_error(pattern, static_cast<int64_t>(a.hidden)); !e.empty()) {
    return invalid_argument(e);
  }
  if (std::string e = quant_scale_error(pattern, raw_enum(a.scale_layout), raw_enum(a.scale_format)); !e.empty()) {
    return invalid_argument(e);
  }
  return Status::ok();
}

// The tensors of a quantized pattern beyond residual_rmsnorm's: quant_out always, scale_out when
// it writes scales (its padded extent: consumers read whole tiles), scale_in when it reads one.
void add_quant_ranges(const arfFusedArgs_t& a, std::vector<Range>* ranges) {
  const Pattern pattern = static_cast<Pattern>(a.pattern);
  const int64_t tokens = static_cast<int64_t>(a.num_tokens), hidden = static_cast<int64_t>(a.hidden);
  ranges->push_back(
      {"quant_out", a.quant_out, static_cast<uint64_t>(quant_out_bytes(pattern, tokens, hidden)),
       true});
  if (quant_writes_scales(pattern)) {
    const int64_t bytes =
        quant_scale_buffer_bytes(pattern, a.scale_layout, a.scale_format, tokens, hidden);
    ranges->push_back({"scale_out", a.scale_out, static_cast<uint64_t>(bytes), true});
  }
  if (quant_reads_scale_in(pattern)) {
    ranges->push_back({"scale_in", a.scale_in, sizeof(float), false, alignof(float)});
  }
}

// Sandwich calls are offered once their GPU tests have passed on the kernels as built; until then a
// call with post_gamma is refused unless the process sets ARF_EXPERIMENTAL_SANDWICH=1 (the GPU
// tests do). Read at every call, as the environment can change; ranks that disagree fail together
// through the same-call check (one refuses, its mates are told).
bool sandwich_offered() {
  const char* v = std::getenv("ARF_EXPERIMENTAL_SANDWICH");
  return v != nullptr && v[0] == '1' && v[1] == '\0';
}

// A sandwich call's post-norm precedes the residual add: pattern allreduce has none.
Status check_post_gamma_pattern(const arfFusedArgs_t& a) {
  if (a.post_gamma == nullptr) return Status::ok();
  if (!sandwich_offered()) {
    return unsupported("post_gamma (sandwich calls) is not offered yet: its GPU verification is "
                       "pending (ARF_EXPERIMENTAL_SANDWICH=1 enables it for testing)");
  }
  if (a.pattern != arfPatternAllReduce) return Status::ok();
  return invalid_argument("post_gamma (a sandwich call's post-norm) is set, but pattern allreduce "
                          "has no norm or residual add: pass NULL, or a norm pattern");
}

Status check_epilogue(const arfFusedArgs_t& a) {
  if (raw_enum(a.gamma_dtype) != raw_enum(a.dtype) && raw_enum(a.gamma_dtype) != arfFloat32) {
    return invalid_argument(std::string("gamma_dtype ") + dtype_name(raw_enum(a.gamma_dtype)) +
                            " must be the activation dtype " + dtype_name(a.dtype) + " or fp32");
  }
  // rsqrt(mean + eps): eps 0 makes an all-zero row 0 * Inf = NaN and a row whose mean of squares
  // underflows to 0 +-Inf, so eps must be a positive finite number (any positive float works).
  if (!std::isfinite(a.eps) || !(a.eps > 0.0f)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", static_cast<double>(a.eps));
    return invalid_argument(std::string("eps ") + text +
                            " must be finite and > 0 (with eps 0 an all-zero row's norm is NaN)");
  }
  if (a.gamma_plus_one != 0 && a.gamma_plus_one != 1) {
    return invalid_argument("gamma_plus_one " + std::to_string(a.gamma_plus_one) +
                            " must be 0 or 1");
  }
  const int rounding = raw_enum(a.norm_rounding);
  if (rounding != arfNormRoundOnce && rounding != arfNormRoundBeforeWeight) {
    return invalid_argument("norm_rounding " + std::to_string(rounding) +
                            " is not a valid arfNormRounding_t");
  }
  return Status::ok();
}

}  // namespace

PointerCheck cuda_pointer_check() {
  return [](const void* ptr, const char* name, int device) -> Status {
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky; keep it from surfacing in a later launch check
      return invalid_argument(std::string(name) + " " + hex(ptr) +
                              " is not a CUDA pointer: " + cudaGetErrorString(err));
    }
    switch (attr.type) {
      case cudaMemoryTypeDevice:
        if (attr.device == device) return Status::ok();
        return invalid_argument(std::string(name) + " " + hex(ptr) + " is memory of device " +
                                std::to_string(attr.device) + ", the communicator is on device " +
                                std::to_string(device));
      case cudaMemoryTypeManaged:
        return Status::ok();
      case cudaMemoryTypeHost:
        if (attr.devicePointer == ptr) return Status::ok();
        return invalid_argument(std::string(name) + " " + hex(ptr) +
                                " is pinned host memory that is not mapped at the same address "
                                "on the device (pass the cudaHostGetDevicePointer address)");
      default:
        return invalid_argument(std::string(name) + " " + hex(ptr) +
                                " is unregistered host memory, not accessible from device " +
                                std::to_string(device));
    }
  };
}

FusedArgs upgrade_fused_args(const arfFusedArgs_t* args) {
  FusedArgs out;
  std::memset(&out.args_, 0, sizeof(out.args_));
  out.args_.struct_size = args->struct_size;
  out.args_.version = args->version;
  if (known_args_size(args->struct_size)) std::memcpy(&out.args_, args, args->struct_size);
  return out;
}

Status validate_shape(const FusedArgs& args, const StaticFacts& facts) {
  const arfFusedArgs_t& a = args.get();
  ARF_RETURN_IF_ERROR(check_header(a, facts));
  ARF_RETURN_IF_ERROR(check_shape(a, facts));
  ARF_RETURN_IF_ERROR(check_quant_shape(a));
  ARF_RETURN_IF_ERROR(check_post_gamma_pattern(a));
  if (a.pattern != arfPatternAllReduce) ARF_RETURN_IF_ERROR(check_epilogue(a));
  return Status::ok();
}

Status validate(const FusedArgs& args, const StaticFacts& facts, int device,
                const PointerCheck& check, const InputBuffer& input_buffer) {
  const arfFusedArgs_t& a = args.get();
  ARF_RETURN_IF_ERROR(check_header(a, facts));
  ARF_RETURN_IF_ERROR(check_shape(a, facts));
  ARF_RETURN_IF_ERROR(check_quant_shape(a));
  ARF_RETURN_IF_ERROR(check_post_gamma_pattern(a));
  if (a.num_tokens == 0) return Status::ok();

  const uint64_t tensor_bytes = static_cast<uint64_t>(a.num_tokens) * a.hidden * 2;
  std::vector<Range> ranges;
  const char* pattern = "allreduce";
  if (a.pattern == arfPatternAllReduce) {
    ranges = {{"input", a.input, tensor_bytes, false},
              {"allreduce_out", a.allreduce_out, tensor_bytes, true}};
  } else {
    pattern = arfPatternName(a.pattern);
    ARF_RETURN_IF_ERROR(check_epilogue(a));
    const uint64_t gamma_bytes = a.hidden * (a.gamma_dtype == arfFloat32 ? 4 : 2);
    ranges = {{"input", a.input, tensor_bytes, false}};
    // residual_in NULL: no residual (the first layer), residual_out = the all-reduce.
    if (a.residual_in != nullptr) ranges.push_back({"residual_in", a.residual_in, tensor_bytes, false});
    ranges.push_back({"gamma", a.gamma, gamma_bytes, false});
    // A sandwich call's post-norm gamma: gamma's dtype and extent.
    if (a.post_gamma != nullptr) ranges.push_back({"post_gamma", a.post_gamma, gamma_bytes, false});
    ranges.push_back({"residual_out", a.residual_out, tensor_bytes, true});
    // norm_out is the quantized patterns' optional side output: NULL means "not wanted".
    const bool quant = is_quant_pattern(static_cast<Pattern>(a.pattern));
    if (!quant || a.norm_out != nullptr) {
      ranges.push_back({"norm_out", a.norm_out, tensor_bytes, true});
    }
    if (quant) add_quant_ranges(a, &ranges);
  }
  ARF_RETURN_IF_ERROR(check_pointers(ranges, pattern));
  ARF_RETURN_IF_ERROR(check_aliasing(ranges));
  ARF_RETURN_IF_ERROR(check_input_buffer(ranges, input_buffer));
  return check_devices(ranges, device, check);
}

Status validate_allreduce(size_t count, arfDataType_t dtype, const void* in, const void* out,
                          const StaticFacts& facts, int device, const PointerCheck& check,
                          const InputBuffer& input_buffer) {
  if (dtype != arfBFloat16 && dtype != arfFloat16) {
    return invalid_argument("dtype " + std::to_string(static_cast<int>(dtype)) + " (" +
                            dtype_name(dtype) + ") is not an activation dtype (bf16 or fp16)");
  }
  if (static_cast<int>(dtype) != static_cast<int>(facts.dtype)) {
    return invalid_argument(std::string("dtype mismatch: call ") + dtype_name(dtype) +
                            ", communicator " + dtype_name(static_cast<int>(facts.dtype)));
  }
  if (count % kElemsPerVec != 0) {
    return invalid_argument("count " + std::to_string(count) +
                            " is not a multiple of 8 (16-byte vectors)");
  }
  const uint64_t capacity = static_cast<uint64_t>(facts.max_tokens) * facts.max_hidden;
  // Over capacity the nccl algorithm runs it (no workspace needed), when there is one.
  if (count > capacity && !facts.nccl) {
    return invalid_argument("count " + std::to_string(count) + " exceeds the capacity " +
                            std::to_string(capacity) + " (max_tokens " +
                            std::to_string(facts.max_tokens) + " x max_hidden " +
                            std::to_string(facts.max_hidden) + ")");
  }
  if (count == 0) return Status::ok();
  const uint64_t bytes = static_cast<uint64_t>(count) * 2;
  const std::vector<Range> ranges = {{"input", in, bytes, false},
                                     {"allreduce_out", out, bytes, true}};
  ARF_RETURN_IF_ERROR(check_pointers(ranges, "allreduce"));
  ARF_RETURN_IF_ERROR(check_aliasing(ranges));
  ARF_RETURN_IF_ERROR(check_input_buffer(ranges, input_buffer));
  return check_devices(ranges, device, check);
}

}  // namespace arf
