// arfusion-bench: nccl-tests-style benchmark of arfusion's fused all-reduce + residual + RMSNorm.
// Defaults are the README's main job: fused op, hidden 8192, bf16, tokens 1..4096, all visible
// GPUs (8 virtual ranks when one is visible), CUDA graphs (-G 1) and checks (-c 1) on.
// Exit code: 0 all measured and correct, 1 a check or measurement failed, 2 setup failed.
#include "args.h"
#include "runner.h"

int main(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<arf::bench::BenchArgs> args = arf::bench::parse_args(argc, argv, &exit_code);
  if (!args) return exit_code;
  if (args->dry_run) return arf::bench::print_dry_run(*args);
  return arf::bench::run_bench(*args);
}
