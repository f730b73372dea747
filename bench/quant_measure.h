// --op quant: the shapes (quant variant x hidden x tokens) and one row per shape, with one cell per
// kQuantColumns entry (results.h): plan each, gate all of them (quant_check.h), then time each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "context.h"
#include "results.h"
#include "timing.h"

namespace arf::bench {

// One CallSpec per (variant, hidden, tokens), in that nesting order; fallback and side output are
// set per column by measure_quant_row.
std::vector<CallSpec> quant_shapes(const BenchArgs& args);

// The largest scale_out any shape writes (arfScaleBufferBytes, padding included).
int64_t quant_scale_capacity(const std::vector<CallSpec>& shapes);

// Bytes a world-1 1_kernel call moves: read input, residual and gamma; write residual_out,
// quant_out and scale_out (no norm_out).
int64_t quant_bytes_moved(const CallSpec& shape, size_t elem_bytes);

// A failed communicator refuses all later work: after the first failure the remaining cells are
// marked skipped and *stopped says why (the caller ends the sweep), as for the other ops.
Row measure_quant_row(BenchContext& ctx, const CallSpec& shape, const TimingConfig& cfg,
                      uint64_t* call, std::string* stopped);

}  // namespace arf::bench
