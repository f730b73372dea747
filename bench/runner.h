// The benchmark driver: ranks and communicators up, one row per shape, tables and JSON out.
#pragma once

#include "args.h"

namespace arf::bench {

// Runs the benchmark `args` describes. Returns the process exit code: 0 when every measurement ran
// and every check passed, 1 when a check found wrong elements or a measurement failed, 2 when setup
// failed (no GPU, bad device list, communicator creation).
int run_bench(const BenchArgs& args);

// --dry-run: prints the shapes, columns and capacity the run would use; touches no CUDA API.
int print_dry_run(const BenchArgs& args);

}  // namespace arf::bench
