// Host-side argument validation, run before anything is launched: a bad call returns a specific
// InvalidArgument (naming the argument and the offending values) and leaves the communicator
// usable. The device-residency check is injected (PointerCheck) so CPU tests can exercise every
// rule without a GPU; the real check asks the CUDA runtime.
#pragma once

#include <cstddef>
#include <functional>

#include "arfusion/arfusion.h"
#include "core/status.h"
#include "policy/plan.h"

namespace arf {

// Returns OK if `ptr` (the argument called `name`) can be dereferenced by kernels running on
// `device`, else InvalidArgument naming it. Called only with non-null pointers.
using PointerCheck = std::function<Status(const void* ptr, const char* name, int device)>;

// The real check: cudaPointerGetAttributes; accepts device memory of `device`, managed memory, and
// host-mapped pinned memory; rejects memory of another device and unregistered host memory.
// Clears the CUDA last-error state it may leave behind. Thread-safe, graph-capture safe.
PointerCheck cuda_pointer_check();

// Validates one arfFusedAllReduce / arfPlan call against the communicator's facts (world, dtype,
// capacity). Checks, in order: struct_size/version; pattern, algorithm and dtype ranges; dtype ==
// communicator dtype; hidden (multiple of 8, 8..max_hidden); num_tokens <= max_tokens. A call with
// num_tokens == 0 is a valid no-op and stops here (its pointers are not inspected). Then, per
// pattern: required pointers non-null and 16-byte aligned; gamma dtype; eps; aliasing (only
// allreduce_out == input, residual_out == residual_in and norm_out == input, exactly); finally
// `check` on every pointer used. Pure apart from `check`.
Status validate(const arfFusedArgs_t& args, const StaticFacts& facts, int device,
                const PointerCheck& check);

// Validates one arfAllReduce call: dtype == communicator dtype, count a multiple of 8 and
// <= max_tokens * max_hidden, in/out non-null, 16-byte aligned, equal or disjoint, on the device.
// count == 0 is a valid no-op (pointers not inspected).
Status validate_allreduce(size_t count, arfDataType_t dtype, const void* in, const void* out,
                          const StaticFacts& facts, int device, const PointerCheck& check);

}  // namespace arf
