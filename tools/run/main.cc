// arfusion-run: starts N rank processes of one job, the way the multi-process
// tests and arfusion-bench are run:
//
//   arfusion-run -n 4 -- ./build/arfusion_gpu_tests --gtest_filter='Ipc*'
//   arfusion-run --devices 0,0,1,1 --timeout 600 -- ./build/arfusion-bench ...
//
// Each rank learns its place from the environment (ARF_RANK, ARF_WORLD_SIZE, ARF_LOCAL_RANK,
// ARF_DEVICE, ARF_RENDEZVOUS_ID: launcher.h); the exit status says which rank failed first and
// how (verdict.h). Host code only: no CUDA is linked, so it runs and is tested on any machine.
#include "args.h"
#include "launcher.h"

int main(int argc, char** argv) {
  int exit_code = 0;
  const auto args = arf::run::parse_args(argc, argv, &exit_code);
  if (!args) return exit_code;
  return arf::run::run_job(*args);
}
