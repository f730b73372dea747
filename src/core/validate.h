// Host-side argument validation, run before anything is launched: a bad call returns a specific
// InvalidArgument (naming the argument and the offending values) and leaves the communicator
// usable. The device-residency check is injected (PointerCheck) so CPU tests can exercise every
// rule without a GPU; the real check asks the CUDA runtime.
#pragma once

#include <cstring>

#include <cstddef>
#include <functional>

#include "arfusion/arfusion.h"
#include "base/status.h"
#include "policy/plan.h"

namespace arf {

// The int a caller stored in an enum field: a C caller may put any int there, and loading an
// out-of-range enum value is undefined behaviour (UBSan -fsanitize=enum flags it, and the compiler
// may drop a range check that follows such a load).
template <typename E>
int raw_enum(const E& field) {
  static_assert(sizeof(E) == sizeof(int));
  int value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

// Returns OK if `ptr` (the argument called `name`) can be dereferenced by kernels running on
// `device`, else InvalidArgument naming it. Called only with non-null pointers.
using PointerCheck = std::function<Status(const void* ptr, const char* name, int device)>;

// The real check: cudaPointerGetAttributes; accepts device memory of `device`, managed memory, and
// host-mapped pinned memory; rejects memory of another device and unregistered host memory.
// Clears the CUDA last-error state it may leave behind. Thread-safe, graph-capture safe.
PointerCheck cuda_pointer_check();

// sizeof(arfFusedArgs_t) as API version 1 callers were built with: everything up to `eps`; as
// versions 2 and 3 declared it: everything up to `fallback`; as version 4 declared it: everything
// up to `norm_rounding` (scale_rule, version 5, starts where version 4's struct ended: validate.cc
// checks that no padding lies between).
inline constexpr size_t kFusedArgsV1Bytes = offsetof(arfFusedArgs_t, quant_out);
inline constexpr size_t kFusedArgsV2Bytes = offsetof(arfFusedArgs_t, norm_rounding);
inline constexpr size_t kFusedArgsV4Bytes = offsetof(arfFusedArgs_t, scale_rule);
// As version 5 declared it: everything up to scale_rule (post_gamma, version 6, starts there).
inline constexpr size_t kFusedArgsV5Bytes = offsetof(arfFusedArgs_t, post_gamma);

// A caller's arfFusedArgs_t as a full current-version struct, read once at the C entry point
// (api.cc) and passed down by const reference: only upgrade_fused_args makes one, so nothing past
// the ABI boundary takes a caller's struct by mistake or reads it again.
class FusedArgs {
 public:
  const arfFusedArgs_t& get() const { return args_; }
  const arfFusedArgs_t* operator->() const { return &args_; }

 private:
  friend FusedArgs upgrade_fused_args(const arfFusedArgs_t* args);
  FusedArgs() = default;
  arfFusedArgs_t args_;
};

// Copies struct_size bytes when struct_size is a size this library knows (version 1's, versions
// 2-3's, version 4's, version 5's or the current one), so fields an older caller's struct does not
// have read as zero (null pointers, post_gamma included, row-major, fp32, fallback auto,
// arfNormRoundOnce, arfFp8ScaleDivide). For
// any other struct_size only struct_size and version are copied, which validate() then rejects.
// Reads no byte beyond what struct_size claims (past the header), so a version-1 struct in a
// version-1-sized allocation is safe.
FusedArgs upgrade_fused_args(const arfFusedArgs_t* args);

// Validates one arfFusedAllReduce / arfPlan call against the communicator's facts (world, dtype,
// capacity). Checks, in order: struct_size/version (each known size with the versions that
// declared it; a version-1 struct cannot ask for a quantized pattern); pattern,
// algorithm and dtype ranges; dtype == communicator dtype; hidden (multiple of 8, 8..max_hidden,
// and the quantized pattern's block: quant_rules.h); num_tokens <= max_tokens; the fallback level
// (0..3; non-auto only for quantized patterns); the scale rule (in its enum; non-default only for
// fp8 per-token / per-group); scale_layout / scale_format for the pattern. A call
// with num_tokens == 0 is a valid no-op and stops here (its pointers are not inspected). Then, per
// pattern: required pointers non-null and aligned (16 bytes; scale_in 4); gamma dtype; eps;
// aliasing (residual_in may be NULL; only allreduce_out == input, residual_out == residual_in and norm_out == input,
// exactly; quant_out and scale_out overlap nothing, over quant_out_bytes and
// quant_scale_buffer_bytes); finally `check` on every pointer used. Quantized patterns: norm_out
// may be NULL; scale_out is required when the pattern writes scales, scale_in when it reads one
// (its value, on the device, is not inspected); unused quant fields are ignored. Fields beyond
// the caller's struct_size read as absent (upgrade_fused_args). post_gamma (a sandwich call) only
// with a norm pattern (checked by validate_shape too: whether it is NULL is part of the shape), then
// as gamma: [hidden] of gamma_dtype, 16-byte aligned, overlapping no output. Pure apart from `check`.
// This rank's input buffer (arfCommGetInputBuffer): its copy-in region, which peers read in place.
// Only a call's input may overlap it, and only starting at its base and within it (then the copy
// is skipped); every other tensor must be disjoint from it, outputs aliasing that input included
// (peers read it while the call runs). ptr NULL: not checked (tests that do not model it).
struct InputBuffer {
  const void* ptr = nullptr;
  uint64_t bytes = 0;
};

Status validate(const FusedArgs& args, const StaticFacts& facts, int device,
                const PointerCheck& check, const InputBuffer& input_buffer = {});

// The checks of validate() that need no tensor: header, pattern/algorithm/dtype, shape, the
// quantized pattern's rules and the epilogue's scalars. What arfPlanShape and arfPlanFromFacts
// validate; a call of that shape may still be refused for its tensors.
Status validate_shape(const FusedArgs& args, const StaticFacts& facts);

// Validates one arfAllReduce call: dtype == communicator dtype, count a multiple of 8 and
// <= max_tokens * max_hidden, in/out non-null, 16-byte aligned, equal or disjoint, on the device.
// count == 0 is a valid no-op (pointers not inspected).
Status validate_allreduce(size_t count, arfDataType_t dtype, const void* in, const void* out,
                          const StaticFacts& facts, int device, const PointerCheck& check,
                          const InputBuffer& input_buffer = {});

}  // namespace arf
